"""The disk space a training run's checkpoints take, estimated from the model's parameter count, and the check
that refuses to start without it (every GRPO engine's launch says what its checkpoints need; train_sft's
LLaMA-Factory here).

Bytes per parameter of one checkpoint, as each trainer writes it (the pinned packages' sources; a GRPO
engine's own in its folder):

- The HF Trainer (TRL 1.16's GRPOTrainer, LLaMA-Factory 0.9.5's) saves the model as it is held, then, unless
  ``save_only_model``, the optimiser, scheduler and RNG (core env transformers 5.10.4 trainer.py:3060-3100),
  and deletes beyond ``save_total_limit`` only after that (:3119-3126): K + 1 on disk at once.
- LLaMA-Factory upcasts a full fine-tune's trainable parameters to fp32 (llamafactory/model/adapter.py:
  313-328); under DeepSpeed with bf16 the engine casts the module back to bf16 (deepspeed/runtime/
  engine.py:2080-2088), so a checkpoint holds the bf16 weights twice, as safetensors (.venv-sft's
  transformers trainer.py:3053) and as DeepSpeed's module states (engine.py:5377-5404), and ZeRO's fp32
  master weights and Adam moments (engine.py:5549-5551, zero/stage_1_and_2.py:3376-3388): 2 + 2 + 12 = 16.
  Without DeepSpeed: fp32 weights and optimizer.pt, 12. The final model (trainer.save_model:
  llamafactory/train/sft/workflow.py:122) adds the weights once more.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lazymem.gpu.model_memory import lora_params, param_total

GIB = 1024**3
# the estimate's allowance for what it leaves out (tokenizer files, logs, trainer state) and its error
MARGIN = 0.1


@dataclass(frozen=True)
class DiskNeed:
    """What the kept checkpoints of a run take, by the estimate."""

    gib: float  # in all, with the margin
    why: str  # how it was reached, for the message


def disk_need(count: int, per_ckpt: float, final: float, what: str) -> DiskNeed:
    """`count` checkpoints of `per_ckpt` GiB and a final model of `final` GiB, with the margin."""
    total = (count * per_ckpt + final) * (1 + MARGIN)
    extra = f" + the final model's {final:.1f}" if final else ""
    return DiskNeed(total, f"{count} checkpoints x {per_ckpt:.1f} GiB ({what}){extra} + {MARGIN:.0%}")


def local_model(model: str | None) -> Path | None:
    """The directory of `model`: itself, or a hub id's newest snapshot in the local HF cache ($HF_HUB_CACHE,
    else $HF_HOME/hub, else ~/.cache/huggingface/hub), as the trainers load it offline."""
    path = Path(str(model)).expanduser()
    if not model or path.is_dir():
        return path if model else None
    home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
    hub = Path(os.environ.get("HF_HUB_CACHE") or home / "hub")
    snapshots = sorted((hub / f"models--{str(model).replace('/', '--')}" / "snapshots").glob("*/config.json"))
    return max(snapshots, key=lambda p: p.stat().st_mtime).parent if snapshots else None


def model_params(model: str | None) -> tuple[int, str, Path] | None:
    """The parameter count of `model`, its name for a message and its directory; None when unknown."""
    path = local_model(model)
    params = param_total(path) if path else None
    if params is None or path is None:
        return None
    return params, f"{Path(str(model)).name}'s {params / 1e9:.2f}B parameters", path


def hf_trainer_need(
    model: str | None, per_param: int, count: int, final_bytes: int = 0, lora_rank: int | None = None
) -> DiskNeed | None:
    """An HF Trainer's checkpoints: `count` on disk at once, `per_param` bytes each per model parameter (per
    adapter parameter with `lora_rank`), and a final model of `final_bytes` per model parameter; None when
    the model's size cannot be read."""
    if (found := model_params(model)) is None:
        return None
    params, name, path = found
    if not lora_rank:
        final = params * final_bytes / GIB
        return disk_need(count, params * per_param / GIB, final, f"{name} x {per_param} bytes")
    if (adapter := lora_params(path, lora_rank)) is None:
        return None
    what = f"rank-{lora_rank} adapters on {name}: {adapter / 1e6:.0f}M x {per_param} bytes"
    return disk_need(count, adapter * per_param / GIB, 0.0, what)


def sft_need(train: Mapping[str, Any]) -> DiskNeed | None:
    """LLaMA-Factory's checkpoints from its training YAML (train_sft): one per epoch (save_strategy epoch,
    which sft_config writes) or save_total_limit + 1 at most, and the final model; a LoRA run (rank
    lora_rank, LLaMA-Factory's default 8) saves its adapters alone."""
    half = bool(train.get("bf16") or train.get("fp16"))
    deepspeed = bool(train.get("deepspeed"))
    weights = 2 if deepspeed and half else 4
    per = weights if train.get("save_only_model") else weights + (weights + 12 if deepspeed else 8)
    if train.get("save_strategy") == "no":
        count = 0
    else:  # a save every save_steps has no count without the dataset's size: the epochs, a lower bound
        count = math.ceil(float(train.get("num_train_epochs") or 3))
    if limit := int(train.get("save_total_limit") or 0):
        count = min(count, limit + 1 + bool(train.get("load_best_model_at_end")))
    model = train.get("model_name_or_path")
    if train.get("finetuning_type") == "lora":
        return hf_trainer_need(model, per, count, lora_rank=int(train.get("lora_rank") or 8))
    return hf_trainer_need(model, per, count, final_bytes=weights)


def used_gib(directory: Path) -> float:
    """GiB already under `directory` (checkpoints of a run being resumed, which count among those kept)."""
    if not directory.is_dir():
        return 0.0
    return sum(f.stat().st_size for f in directory.rglob("*") if f.is_file() and not f.is_symlink()) / GIB


def check_disk(
    directory: str | Path,
    min_free_gib: float,
    need: DiskNeed | None = None,
    key: str = "train.grpo",
    fix: str = "point train.grpo.checkpoint_dir at a larger disk",
) -> None:
    """ValueError when the filesystem that will hold ``directory`` has less free than the checkpoints need
    (`need`, less what the directory already holds: a resumed run's) or than ``min_free_gib``, the floor."""
    where = Path(directory).resolve()
    probe = next(p for p in (where, *where.parents) if p.exists())  # the directory may not exist yet
    free = shutil.disk_usage(probe).free / GIB
    more = max(0.0, need.gib - used_gib(where)) if need else 0.0
    if free >= max(min_free_gib, more):
        return
    said = f"{key}.min_free_gib asks for {min_free_gib:g} GiB"
    if need is not None:
        held = need.gib - more
        there = f"; {held:.0f} GiB of them are there already" if held >= 0.5 else ""
        said = f"the kept checkpoints need about {more:.0f} GiB more ({need.why}{there}); {said}"
    raise ValueError(
        f"only {free:.1f} GiB free for checkpoints in {where} ({said}): free space there, or {fix}"
    )
