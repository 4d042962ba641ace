"""task=report: everything written from a sweep's runs, and a clear stop without inputs."""

from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from lazymem.tasks import report as report_task


def test_report_task_writes_everything(sweep, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    cfg = OmegaConf.create({"task": "report", "report": {"inputs": [str(sweep)]}})
    result = report_task.run(cfg, SimpleNamespace(dir=out))
    assert len(result["runs"]) == 2
    for name in ("report.md", "table1_longmemeval.csv", "table2_radius.csv", "dashboard.html",
                 "figure2_longmemeval.png", "accuracy_by_radius.png"):  # fmt: skip
        assert (out / name).is_file(), name
    assert "Table 2" in capsys.readouterr().out


def test_report_task_needs_inputs(tmp_path):
    with pytest.raises(SystemExit, match=r"report.inputs=\["):
        report_task.run(OmegaConf.create({"task": "report"}), SimpleNamespace(dir=tmp_path))
