"""LLaMA-Factory files for the SFT stage (paper Table 10): the training YAML and a DeepSpeed ZeRO-2 JSON.

Written as plain data next to the dataset; lazymem never imports llamafactory. Train with
`llamafactory-cli train sft.yaml` (or `FORCE_TORCHRUN=1 ...` on several GPUs).
"""

from __future__ import annotations

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


def sft_yaml(sft: Mapping[str, Any], dataset_dir: Path, deepspeed: Path, with_reasoning: bool) -> dict:
    """The training YAML. `template: qwen3` trains an empty think block unless enable_thinking is false,
    so the switch follows whether the targets carry reasoning (DESIGN.md)."""
    return {
        "model_name_or_path": str(sft["model"]),
        "trust_remote_code": True,
        "stage": "sft",
        "do_train": True,
        "finetuning_type": "full",
        "deepspeed": str(deepspeed),
        "dataset": "lazymem_sft",
        "dataset_dir": str(dataset_dir),
        "template": "qwen3",
        "enable_thinking": bool(with_reasoning),
        "cutoff_len": int(sft["cutoff_len"]),
        "overwrite_cache": True,
        "preprocessing_num_workers": int(sft["preprocessing_num_workers"]),
        "output_dir": str(sft["output_dir"]),
        "logging_steps": int(sft["logging_steps"]),
        "save_strategy": "epoch",
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
        "ddp_timeout": 180000000,
    }
