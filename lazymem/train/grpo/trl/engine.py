"""The TRL 1.16 engine of task=train_grpo: GRPOTrainer in one subprocess,
`python -m lazymem.train.grpo.trl.run trl_config.json` (the settings config.py writes). Checkpoints are
``checkpoint-N/`` (HF Trainer): a model directory transformers and vLLM load, or a LoRA adapter directory
(``adapter: true`` in the choice; peft writes adapter_config.json beside the adapter's weights), which
task=merge_rl merges (merge.py).

Their disk space: the HF Trainer keeps save_total_limit = max_actor_ckpt_to_keep, + 1 while it rotates
(lazymem/train/checkpoint_disk.py). A full fine-tune holds fp32 weights (config.weights_dtype): 4 + 8 = 12
bytes a parameter with AdamW's moments; the LoRA adapters are fp32 too, PEFT upcasting them
(trl/trainer/grpo_trainer.py:452-476), and only they and their optimiser state are saved: 12 per adapter
parameter.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lazymem.train.checkpoint_disk import DiskNeed, hf_trainer_need
from lazymem.train.grpo.engine import Launch
from lazymem.train.grpo.trl.config import trl_config
from lazymem.train.grpo.trl.merge import merge

CONFIG = "trl_config.json"


def trl_need(grpo: Mapping[str, Any]) -> DiskNeed | None:
    """TRL's GRPOTrainer checkpoints (see the module docstring); a LoRA run saves its adapters alone."""
    lora = grpo.get("lora") or {}
    rank = int(lora["r"]) if lora.get("enabled") else None
    return hf_trainer_need(grpo.get("model"), 12, int(grpo["max_actor_ckpt_to_keep"]) + 1, lora_rank=rank)


class TrlEngine:
    """GRPO on TRL's GRPOTrainer (the GrpoEngine contract, grpo/engine.py)."""

    name = "trl"
    packages = ("trl",)
    layout = "checkpoint-{}"
    env_fix = (
        "bash scripts/setup_gpu_env.sh rl on the GPU node, then LAZYMEM_RL_PYTHON=.venv-gpu-rl/bin/python "
        "(trl, vLLM and a CUDA torch), or train.grpo.use_vllm=false for transformers' generate"
    )

    def env_modules(self, grpo: Mapping[str, Any] | None) -> tuple[str, ...]:
        # use_vllm: TRL 1.16's GRPOTrainer builds its vLLM rollout engine (trl/trainer/grpo_trainer.py:1105),
        # which raises ImportError without vllm (trl/generation/vllm_generation.py:294-295); without it TRL
        # is lazymem's own dependency, in every environment it runs in
        use_vllm = True if grpo is None else bool(grpo.get("use_vllm"))
        return ("vllm",) if use_vllm else ()

    def launch(self, grpo: Mapping[str, Any], reward: Mapping[str, Any] | None, run_dir: Path) -> Launch:
        config = trl_config(grpo, reward)
        path = Path(run_dir) / CONFIG
        path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        return Launch(
            command=[grpo.get("python") or sys.executable, "-m", "lazymem.train.grpo.trl.run", str(path)],
            log=Path(run_dir) / "trl.log",
            gpus=int(grpo["n_gpus_per_node"]),
            plan_gpus=True,
            validates=True,  # the engine's callback logs every validation round, curriculum or not
            info={"config": str(path)},
            disk=trl_need(grpo),
            # one process (run.py, no accelerate launch): GRPOTrainer awaits async reward functions on one
            # daemon event loop (trl 1.16 trl/trainer/grpo_trainer.py:749-758 starts it, :1639-1660 gathers
            # them there), and MemoryReward gathers a batch's rollouts on it (callbacks.py)
            reward_loops=1,
        )

    def checkpoint_facts(self, checkpoint: Path) -> dict[str, Any]:
        return {"adapter": (checkpoint / "adapter_config.json").is_file()}

    def merge(
        self, choice: Mapping[str, Any], target: Path, run_dir: Path, python: str | None, dry_run: bool
    ) -> dict[str, Any]:
        return merge(choice, target)  # in this process, dry run or not: nothing to hand to another Python
