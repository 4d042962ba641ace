"""TRL's chosen checkpoint as a model directory (task=merge_rl).

A TRL checkpoint is already a model directory that transformers and vLLM load, or a LoRA adapter directory
(``adapter: true`` in the choice): the adapter is merged into its base model (peft's ``merge_and_unload``),
else the model's files are copied without the training state.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# what a model directory needs: weights, config, tokenizer and generation settings; not the optimiser's state
MODEL_FILES = ("*.safetensors", "*.json", "*.txt", "*.model", "*.jinja", "*.tiktoken")
TRAINING_STATE = {"trainer_state.json", "training_args.bin", "optimizer.pt", "scheduler.pt", "rng_state.pth"}


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


def merge(choice: Mapping[str, Any], target: Path) -> dict[str, Any]:
    """The chosen checkpoint's model, merged or copied into `target`; the files written."""
    checkpoint = Path(choice["path"])
    files = merge_adapter(checkpoint, target) if choice.get("adapter") else copy_model(checkpoint, target)
    return {"files": files}
