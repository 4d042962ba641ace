"""task=split through the CLI: the split and its counts written, then the questions selected with
data.split from that file or computed on the fly, and a split file naming an unknown question refused."""

import json

from helpers import run_cli


def test_split_task_and_split_selection(tmp_path):
    out = run_cli(
        "task=split", "data.loader.per_type=5", "data.loader.abstention=0", f"hydra.run.dir={tmp_path}/s"
    )
    assert out.returncode == 0, out.stderr
    split = json.loads((tmp_path / "s" / "split.json").read_text())
    counts = json.loads((tmp_path / "s" / "split_counts.json").read_text())
    assert counts["total"] == {"train": 22, "val": 2, "test": 6, "total": 30}
    assert len(split["test"]) == 6
    out = run_cli(
        "data.split=test",
        f"data.split_file={tmp_path}/s/split.json",
        "data.loader.per_type=5",
        "data.loader.abstention=0",
        f"hydra.run.dir={tmp_path}/t",
    )
    assert out.returncode == 0, out.stderr
    stats = json.loads((tmp_path / "t" / "stats.json").read_text())
    assert stats["questions"] == 6
    # computing the split on the fly gives the same questions as the file
    out = run_cli(
        "data.split=test", "data.loader.per_type=5", "data.loader.abstention=0", f"hydra.run.dir={tmp_path}/u"
    )
    assert json.loads((tmp_path / "u" / "stats.json").read_text())["by_type"] == stats["by_type"]
    split["test"].append("no-such-question")
    (tmp_path / "bad.json").write_text(json.dumps(split))
    out = run_cli("data.split=test", f"data.split_file={tmp_path}/bad.json", f"hydra.run.dir={tmp_path}/v")
    assert out.returncode != 0
    assert f"file {tmp_path}/bad.json, record no-such-question, field 'test'" in out.stderr
