"""task=merge_rl: the chosen GRPO checkpoint as a model directory. TRL's is copied for real (and loads with
transformers); VERL's merger cannot run without its FSDP shards and a GPU, so its command is checked against
VERL 0.9.1's own argument parser."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from lazymem.tasks import merge_rl
from lazymem.train.tiny_qwen3 import write


def _run(tmp_path, checkpoint_dir, **merge):
    cfg = OmegaConf.create(
        {"merge": {"checkpoint_dir": str(checkpoint_dir), "python": None, "dry_run": False} | merge}
    )
    out = tmp_path / "run"
    out.mkdir(exist_ok=True)
    return merge_rl.run(cfg, SimpleNamespace(dir=out)), out


def _choose(directory, **choice):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "selected_checkpoint.json").write_text(json.dumps(choice))


def test_a_trl_checkpoint_becomes_a_model_directory_without_the_training_state(tmp_path):
    ckpt = tmp_path / "ckpts" / "checkpoint-2"
    write(ckpt, hidden=64, vocab=300)
    for name in ("optimizer.pt", "scheduler.pt", "trainer_state.json", "rng_state.pth"):
        (ckpt / name).write_text("training state")
    _choose(tmp_path / "ckpts", engine="trl", path=str(ckpt), step=2)
    record, out = _run(tmp_path, tmp_path / "ckpts")
    model = out / "model"
    assert record["engine"] == "trl" and record["step"] == 2 and record["model"] == str(model.resolve())
    assert not {"optimizer.pt", "scheduler.pt", "trainer_state.json", "rng_state.pth"} & {
        p.name for p in model.iterdir()
    }
    from transformers import AutoModelForCausalLM, AutoTokenizer

    AutoModelForCausalLM.from_pretrained(str(model))
    assert AutoTokenizer.from_pretrained(str(model)).eos_token == "<|im_end|>"
    assert json.loads((out / "merged.json").read_text())["checkpoint"] == str(ckpt)


def test_verl_merge_command_is_what_verls_own_parser_accepts(tmp_path, monkeypatch):
    _choose(tmp_path / "ckpts", engine="verl", path=str(tmp_path / "ckpts" / "global_step_30"), step=30)
    record, out = _run(tmp_path, tmp_path / "ckpts", dry_run=True, python="/rl/bin/python")
    cmd = record["command"].split()
    assert record["dry_run"] and cmd[:3] == ["/rl/bin/python", "-m", "verl.model_merger"]
    assert (out / "command.sh").read_text().splitlines()[1] == record["command"]
    from verl.model_merger.base_model_merger import parse_args

    monkeypatch.setattr(sys, "argv", ["verl.model_merger", *cmd[3:]])
    args = parse_args()
    assert (args.operation, args.backend) == ("merge", "fsdp")
    assert args.local_dir == str(tmp_path / "ckpts" / "global_step_30" / "actor")
    assert args.target_dir == str((out / "model").resolve())


@pytest.mark.parametrize(
    ("choice", "message"),
    [
        (None, "selected_checkpoint.json not found"),
        ({"engine": "deepspeed", "path": "/x"}, "needs `engine` (trl or verl) and `path`"),
    ],
)
def test_a_missing_or_unknown_choice_is_one_clear_error(tmp_path, choice, message):
    if choice is not None:
        _choose(tmp_path / "ckpts", **choice)
    with pytest.raises(SystemExit, match="error: .*" + message.replace("(", r"\(").replace(")", r"\)")):
        _run(tmp_path, tmp_path / "ckpts")
    with pytest.raises(SystemExit, match="merge.checkpoint_dir is not set"):
        merge_rl.run(OmegaConf.create({"merge": {"checkpoint_dir": None}}), SimpleNamespace(dir=tmp_path))
