"""GRPO with TRL 1.16's GRPOTrainer: `python -m lazymem.train.grpo.trl.run TRL_CONFIG.json` (engine.py writes
the file; task=train_grpo runs this through lazymem.subproc.stream, so it dies with the task).

Rows are build_rl's parquet files as VERL reads them (prompt chat, reward_model.ground_truth, extra_info).
Validation is TRL's own evaluation (``eval_strategy=steps``, ``eval_on_start``): it samples the validation
prompts with the rollout engine (vLLM when use_vllm) and scores them with the same reward function, which a
generation pass of our own could only repeat more slowly with transformers' generate. Its price: TRL samples
at the rollout temperature where VERL validates greedily (docs/fidelity.md, "GRPO with TRL").

Resume: with a ``checkpoint-N`` in the checkpoint directory, training continues from the newest one
(``resume_from_checkpoint``: model, optimiser, scheduler, RNG and step). Steps after N that an interrupted
run logged are dropped from train_metrics.jsonl and validation_metrics.jsonl first, since they are done
again; the curriculum's state file is kept as it is (its phase never moves back, as under VERL).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

log = logging.getLogger("lazymem.train.grpo.trl.run")


def rows(path: str):
    """A build_rl parquet file as a datasets.Dataset (no cache copy)."""
    from datasets import Dataset

    return Dataset(pq.read_table(path))


def newest_checkpoint(directory: Path) -> tuple[Path | None, int]:
    """The newest complete ``checkpoint-N`` and N, or (None, 0). Complete: it holds trainer_state.json, which
    the HF Trainer writes last (transformers 5.10 trainer.py:3060-3114, _save_checkpoint); a run killed in
    the middle of a save leaves one without it, which transformers' get_last_checkpoint would pick."""
    found = [
        (int(p.name.rsplit("-", 1)[1]), p)
        for p in directory.glob("checkpoint-*")
        if p.name.rsplit("-", 1)[1].isdigit() and (p / "trainer_state.json").is_file()
    ]
    if not found:
        return None, 0
    step, path = max(found)
    return path, step


def train(config: dict[str, Any]) -> Path | None:
    """Run GRPO as ``config`` says (config.trl_config); returns the checkpoint it resumed from."""
    from peft import LoraConfig
    from trl import GRPOConfig

    from lazymem.train.grpo.curriculum import Curriculum
    from lazymem.train.grpo.quality_judge import JudgeConfig
    from lazymem.train.grpo.trl.callbacks import GrpoLog, MemoryReward, PolicyMoved, forget_unsaved
    from lazymem.train.grpo.trl.trainer import MemoryGrpoTrainer

    directory = Path(config["checkpoint_dir"])
    directory.mkdir(parents=True, exist_ok=True)
    resume, step = newest_checkpoint(directory)
    if dropped := forget_unsaved(directory, step):
        log.info("dropped %d logged rows after step %d: the resumed run redoes those steps", dropped, step)
    settings = config["reward"]
    curriculum = None
    if config["curriculum"]:  # writes the state file, or reads the phase a resumed run reached
        keys = ("tau", "lam_phase1", "lam_phase2")
        curriculum = Curriculum(settings["curriculum_state"], **{k: float(settings[k]) for k in keys})
    reward = MemoryReward(settings)
    judge = JudgeConfig.from_mapping(settings["judge"])
    callback = GrpoLog(reward, directory, judge.max_error_rate, curriculum, judge.min_step_calls)
    lora = config["lora"]
    trainer = MemoryGrpoTrainer(
        model=config["model"],
        reward_funcs=[reward],
        args=GRPOConfig(**config["args"]),
        train_dataset=rows(config["train_file"]),
        eval_dataset=rows(config["val_file"]),
        peft_config=LoraConfig(**lora) if lora else None,
        callbacks=[callback, PolicyMoved(int(config["policy_check_step"]))],
    )
    reward.training = lambda: trainer.model.training
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    return resume


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        raise SystemExit("usage: python -m lazymem.train.grpo.trl.run TRL_CONFIG.json")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    resumed = train(config)
    log.info("GRPO done%s", f" (resumed from {resumed})" if resumed else "")


if __name__ == "__main__":
    main()
