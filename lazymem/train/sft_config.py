"""LLaMA-Factory files for the SFT stage (paper Table 10): the training YAML and a DeepSpeed ZeRO-2 JSON.

Written as plain data next to the dataset; lazymem never imports llamafactory. Train with
`llamafactory-cli train sft.yaml` (or `FORCE_TORCHRUN=1 ...` on several GPUs).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# ZeRO-2 with values left to the HF Trainer ("auto"), the layout LLaMA-Factory's examples use.
DS_Z2 = {
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "zero_allow_untested_optimizer": True,
    "bf16": {"enabled": "auto"},
    "fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16},
    "zero_optimization": {
        "stage": 2,
        "allgather_partitions": True,
        "allgather_bucket_size": 5e8,
        "overlap_comm": False,
        "reduce_scatter": True,
        "reduce_bucket_size": 5e8,
        "contiguous_gradients": True,
        "round_robin_gradients": True,
    },
}


def sft_yaml(
    sft: Mapping[str, Any],
    dataset_dir: Path,
    deepspeed: Path,
    with_reasoning: bool,
    eval_dataset: str | None = None,
) -> dict:
    """The training YAML. `template: qwen3` trains an empty think block unless enable_thinking is false,
    so the switch follows whether the targets carry reasoning (DESIGN.md). With `eval_dataset` (the
    validation split's instances) every epoch is evaluated and the lowest-loss epoch's weights are the
    final ones (App. D.1: checkpoints are chosen on the validation split). Without one there is no choice
    and nothing resumes from a checkpoint (train_sft starts over), so only the final weights are saved: a
    checkpoint per epoch cost chain_cpu 60 saves, ~890 MB."""
    out = {
        "model_name_or_path": str(sft["model"]),
        "trust_remote_code": True,
        "stage": "sft",
        "do_train": True,
        "finetuning_type": "full",
        "deepspeed": str(deepspeed),
        "dataset": "lazymem_sft",
        "dataset_dir": str(dataset_dir),
        "template": str(sft.get("template") or "qwen3"),
        "enable_thinking": bool(with_reasoning),
        "cutoff_len": int(sft["cutoff_len"]),
        "overwrite_cache": True,
        "preprocessing_num_workers": int(sft["preprocessing_num_workers"]),
        "output_dir": str(sft["output_dir"]),
        "logging_steps": int(sft["logging_steps"]),
        "save_strategy": "epoch" if eval_dataset else "no",
        "plot_loss": True,
        "overwrite_output_dir": True,
        "report_to": str(sft["report_to"]),
        "run_name": str(sft["run_name"]),
        "per_device_train_batch_size": int(sft["per_device_batch"]),
        "gradient_accumulation_steps": int(sft["grad_accum"]),
        "learning_rate": float(sft["lr"]),
        "num_train_epochs": float(sft["epochs"]),
        "lr_scheduler_type": str(sft["lr_scheduler"]),
        "warmup_ratio": float(sft["warmup_ratio"]),
        "bf16": bool(sft["bf16"]),
        "optim": str(sft["optim"]),
        "average_tokens_across_devices": bool(sft["average_tokens_across_devices"]),
        "ddp_timeout": 180000000,
    }
    if eval_dataset:
        out.update(
            eval_dataset=eval_dataset,
            eval_strategy="epoch",
            per_device_eval_batch_size=int(sft["per_device_batch"]),
            load_best_model_at_end=True,
            metric_for_best_model="eval_loss",
            greater_is_better=False,
        )
    return out


def train_yaml(base: Mapping[str, Any], overrides: Mapping[str, Any], output_dir: Path) -> dict:
    """The YAML llamafactory-cli trains on: build_sft's sft.yaml with ``overrides`` applied (a None value
    removes the key) and ``output_dir`` set to this run's (unless an override names one)."""
    out = {**base, "output_dir": str(output_dir)}
    for key, v in overrides.items():
        if v is None:
            out.pop(key, None)
        else:
            out[key] = v
    return out


def needs_torchrun(train: Mapping[str, Any], nproc_per_node: int) -> bool:
    """LLaMA-Factory refuses DeepSpeed outside a torchrun launch, and several GPUs need one anyway."""
    return nproc_per_node > 1 or bool(train.get("deepspeed"))


def checkpoint_record(output_dir: Path) -> dict:
    """What a finished SFT run left: the weights, and the Trainer's own results (loss, steps, runtime)."""
    weights = sorted(p.name for p in output_dir.glob("*.safetensors")) + sorted(
        p.name for p in output_dir.glob("pytorch_model*.bin")
    )
    record: dict[str, Any] = {"path": str(output_dir.resolve()), "weights": weights}
    results = output_dir / "all_results.json"
    if results.exists():
        record["results"] = json.loads(results.read_text())
    state = output_dir / "trainer_state.json"
    if state.exists():
        s = json.loads(state.read_text())
        record["global_step"] = s.get("global_step")
        losses = [h["loss"] for h in s.get("log_history", []) if "loss" in h]
        record["logged_losses"] = losses
    return record
