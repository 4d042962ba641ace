"""VERL's merger command on the chosen step, checked against verl 0.9.1's own argument parser (the merger
itself needs FSDP shards and a GPU); a dry run writes the command and runs nothing."""

from __future__ import annotations

import sys

from lazymem.train.grpo.verl.merge import merge


def test_the_merge_command_is_what_verls_own_parser_accepts(tmp_path, monkeypatch):
    step = tmp_path / "ckpts" / "global_step_30"
    target = tmp_path / "run" / "model"
    (tmp_path / "run").mkdir()
    record = merge({"path": str(step)}, target, tmp_path / "run", "/rl/bin/python", dry_run=True)
    cmd = record["command"].split()
    assert record["dry_run"] and cmd[:3] == ["/rl/bin/python", "-m", "verl.model_merger"]
    assert (tmp_path / "run" / "command.sh").read_text().splitlines()[1] == record["command"]
    assert not target.exists()
    from verl.model_merger.base_model_merger import parse_args

    monkeypatch.setattr(sys, "argv", ["verl.model_merger", *cmd[3:]])
    args = parse_args()
    assert (args.operation, args.backend) == ("merge", "fsdp")
    assert (args.local_dir, args.target_dir) == (str(step / "actor"), str(target))
