"""task=merge_rl: the chosen GRPO checkpoint as a model directory that vLLM and transformers load.

Reads ``selected_checkpoint.json`` in ``merge.checkpoint_dir`` (written by task=train_grpo: the checkpoint
chosen on the validation split, and the engine that wrote it) and writes ``<run dir>/model`` and
``merged.json``:

- ``verl``: VERL saves sharded FSDP checkpoints; its merger turns the chosen step's ``actor/`` shards into a
  Hugging Face model directory (``python -m verl.model_merger merge --backend fsdp --local_dir ...
  --target_dir ...``, verl 0.9.1 model_merger/base_model_merger.py:34-79). It runs in VERL's environment
  (``merge.python``, the GPU nodes' RL environment); ``merge.dry_run=true`` writes command.sh only.
- ``trl``: TRL's checkpoint is already a model directory; with a LoRA adapter (``adapter: true``) the
  adapter is merged into its base model (peft's ``merge_and_unload``), else the model's files are copied.
"""

from __future__ import annotations

import json
import logging
import shlex
import shutil
import sys
from pathlib import Path

from lazymem.subproc import stream
from lazymem.train.checkpoint_select import SELECTED

log = logging.getLogger(__name__)
# what a model directory needs: weights, config, tokenizer and generation settings; not the optimiser's state
MODEL_FILES = ("*.safetensors", "*.json", "*.txt", "*.model", "*.jinja", "*.tiktoken")
TRAINING_STATE = {"trainer_state.json", "training_args.bin", "optimizer.pt", "scheduler.pt", "rng_state.pth"}


def selected(checkpoint_dir) -> dict:
    """The choice task=train_grpo wrote, with one clear error when there is none."""
    if not checkpoint_dir:
        raise SystemExit(
            "error: merge.checkpoint_dir is not set: point it at train_grpo's train.grpo.checkpoint_dir"
        )
    path = Path(checkpoint_dir) / SELECTED
    if not path.is_file():
        raise SystemExit(
            f"error: {path} not found: task=train_grpo writes it after training (train.grpo.checkpoint_dir)"
        )
    choice = json.loads(path.read_text(encoding="utf-8"))
    if choice.get("engine") not in ("verl", "trl") or not choice.get("path"):
        raise SystemExit(f"error: {path}: needs `engine` (verl or trl) and `path`, found {sorted(choice)}")
    return choice


def verl_command(python: str | None, checkpoint: str, target: Path) -> list[str]:
    """VERL's merger on one chosen step: its actor's FSDP shards into a Hugging Face directory."""
    return [
        python or sys.executable,
        "-m",
        "verl.model_merger",
        "merge",
        "--backend",
        "fsdp",
        "--local_dir",
        str(Path(checkpoint) / "actor"),
        "--target_dir",
        str(target),
    ]


def copy_model(checkpoint: Path, target: Path) -> list[str]:
    """A full-weights TRL checkpoint's model files, without the optimiser and trainer state."""
    target.mkdir(parents=True, exist_ok=True)
    copied = []
    for pattern in MODEL_FILES:
        for f in sorted(checkpoint.glob(pattern)):
            if f.name not in TRAINING_STATE:
                shutil.copy2(f, target / f.name)
                copied.append(f.name)
    if not any(name.endswith(".safetensors") for name in copied):
        raise SystemExit(f"error: {checkpoint} holds no *.safetensors weights to copy")
    return copied


def merge_adapter(checkpoint: Path, target: Path) -> list[str]:
    """A LoRA adapter merged into its base model (the base named in adapter_config.json)."""
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoTokenizer

    model = AutoPeftModelForCausalLM.from_pretrained(str(checkpoint))
    model.merge_and_unload().save_pretrained(str(target))
    AutoTokenizer.from_pretrained(str(checkpoint)).save_pretrained(str(target))
    return sorted(p.name for p in target.iterdir())


def run(cfg, run) -> dict:
    opts = cfg.merge
    choice = selected(opts.checkpoint_dir)
    target = (run.dir / "model").resolve()
    record = {
        "engine": choice["engine"],
        "checkpoint": choice["path"],
        "step": choice.get("step"),
        "model": str(target),
    }
    if choice["engine"] == "verl":
        cmd = verl_command(opts.get("python"), choice["path"], target)
        (run.dir / "command.sh").write_text("#!/bin/sh\n" + shlex.join(cmd) + "\n", encoding="utf-8")
        record["command"] = shlex.join(cmd)
        if opts.dry_run:
            print(f"dry run: {run.dir / 'command.sh'}")
            return record | {"dry_run": True}
        rc = stream(cmd, run.dir / "merge.log")
        if rc != 0:
            raise RuntimeError(f"VERL's model merger exited with status {rc}; see {run.dir / 'merge.log'}")
    elif choice.get("adapter"):
        record["files"] = merge_adapter(Path(choice["path"]), target)
    else:
        record["files"] = copy_model(Path(choice["path"]), target)
    (run.dir / "merged.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"RL model ({choice['engine']}, step {choice.get('step')}): {target}")
    return record
