"""task=train_gate end to end on a small synthetic set: a gate.json the method loads, and a threshold that
is never worse on validation than keeping everything (the choice includes threshold 0)."""

import json

import pytest

from lazymem.methods.extractive_gate import BUNDLED, ExtractiveGate, GateModel

from helpers import run_cli

pytestmark = pytest.mark.slow


def test_train_gate_writes_a_loadable_gate(tmp_path):
    out = run_cli(
        "+experiment=train_gate_cpu",
        "data.loader.per_type=6",
        "data.loader.abstention=0",
        f"hydra.run.dir={tmp_path}/run",
        env={"LAZYMEM_CACHE": str(tmp_path / "cache")},
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads((tmp_path / "run" / "gate_report.json").read_text())
    gate, keep_all = report["validation"]["gate"], report["validation"]["keep_all"]
    assert gate["action_reward"] >= keep_all["action_reward"]
    assert keep_all["gold_kept"] == 1.0 and keep_all["nongold_dropped"] == 0.0
    method = ExtractiveGate(model=str(tmp_path / "run" / "gate.json"))
    assert method.gate.threshold == report["gate"]["threshold"]
    # trained under the CPU default retrieval, as the bundled gate was: the same dense retriever recorded
    assert method.gate.encoder == GateModel.load(BUNDLED).encoder is not None
    assert "| gate |" in out.stdout
