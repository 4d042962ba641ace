"""task=train_sft: supervised fine-tuning of the memory model with LLaMA-Factory (paper Section 3.3).

Reads the sft.yaml of a build_sft run (train.sft.data_dir), applies train.sft.overrides, points the
output at <run dir>/model and runs `llamafactory-cli train` from LLaMA-Factory's own environment
(train.sft.venv, created by `make setup-sft`) as a subprocess, streaming its output into the console and
llamafactory.log. Several GPUs or a DeepSpeed config launch through torchrun (FORCE_TORCHRUN=1). It
refuses to start when the output's disk has less free space than the checkpoints need (estimated from the
model's parameter count: lazymem/train/checkpoint_disk.py) or than train.sft.min_free_gib.
checkpoint.json records the checkpoint path, its weight files and the Trainer's results; with a
validation set (build_sft's val_questions) the epoch with the lowest validation loss is the final model,
and selected_checkpoint.json beside it says which (checkpoint_select.sft_selection).
"""

from __future__ import annotations

import json
import logging
import shlex
from pathlib import Path

import yaml
from omegaconf import OmegaConf

from lazymem import tracking
from lazymem.chain.versions import env_versions, venv_of
from lazymem.cuda_env import cuda_torch_problem
from lazymem.llm.backends import has_gpu
from lazymem.subproc import stream
from lazymem.tasks.contract import Task
from lazymem.train.checkpoint_disk import check_disk, sft_need
from lazymem.train.checkpoint_select import sft_selection
from lazymem.train.sft_config import checkpoint_record, needs_torchrun, train_yaml

log = logging.getLogger(__name__)
SFT_DISK_FIX = "run it with hydra.run.dir on a larger disk, or pass +train.sft.overrides.output_dir=DIR there"


def _inputs(data_dir) -> dict:
    """sft.yaml of a build_sft run, after checking that its dataset has something to train on."""
    if not data_dir:
        raise SystemExit("error: train.sft.data_dir is not set: point it at a task=build_sft run directory")
    data_dir = Path(data_dir)
    path = data_dir / "sft.yaml"
    if not path.is_file():
        raise SystemExit(
            f"error: {path} not found: train.sft.data_dir must be a task=build_sft run directory"
        )
    base = yaml.safe_load(path.read_text(encoding="utf-8"))
    info = json.loads((Path(base["dataset_dir"]) / "dataset_info.json").read_text(encoding="utf-8"))
    data_file = Path(base["dataset_dir"]) / info[base["dataset"]]["file_name"]
    if not json.loads(data_file.read_text(encoding="utf-8")):
        raise SystemExit(
            f"error: {data_file} holds no SFT instance; see sft_stats.json for the discard reasons"
        )
    return base


def problems(cfg) -> list[str]:
    """LLaMA-Factory's environment, checked before a chain starts (lazymem/chain/preflight.py)."""
    cli = Path(cfg.train.sft.venv) / "bin" / "llamafactory-cli"
    if cli.exists():
        return [p for p in [_cuda_problem(cfg.train.sft)] if p]
    return [
        f"{cli} not found: create LLaMA-Factory's environment with `make setup-sft` (or train.sft.venv=...)"
    ]


def _cuda_problem(sft) -> str | None:
    """On a GPU node, SFT on the GPUs (no `use_cpu` among its overrides) from an environment whose torch
    cannot reach them: .venv-sft's default torch is the CPU build."""
    if (sft.get("overrides") or {}).get("use_cpu") or not has_gpu():
        return None
    return cuda_torch_problem(str(Path(sft.venv) / "bin" / "python"), "LLaMA-Factory's SFT on GPUs", "sft")


def run(cfg, run) -> dict:
    sft = cfg.train.sft
    base = _inputs(sft.data_dir)
    name = f"{tracking.run_name(run.dir)}-sft"  # the W&B run name, beside this run's own
    report_to = "wandb" if tracking.trainer_reports(cfg) else "none"  # logger=wandb: training steps too
    overrides = {"run_name": name, "report_to": report_to}
    overrides |= OmegaConf.to_container(sft.overrides, resolve=True) or {}
    train = train_yaml(base, overrides, (run.dir / "model").resolve())
    config_path = run.dir / "llamafactory.yaml"
    config_path.write_text(yaml.safe_dump(train, sort_keys=False), encoding="utf-8")
    cli = Path(sft.venv) / "bin" / "llamafactory-cli"
    cmd = [str(cli), "train", str(config_path.resolve())]
    env = tracking.subprocess_env(cfg, run.dir, name=name)
    nproc = int(sft.nproc_per_node)
    launch = {}
    if needs_torchrun(train, nproc):
        launch = {"FORCE_TORCHRUN": "1", "NPROC_PER_NODE": str(nproc)}
    env.update(launch)
    line = " ".join([*(f"{k}={v}" for k, v in launch.items()), shlex.join(cmd)])
    (run.dir / "command.sh").write_text(f"#!/bin/sh\n{line}\n", encoding="utf-8")
    result = {"config": str(config_path), "output_dir": train["output_dir"], "torchrun": bool(launch)}
    if sft.dry_run:
        print(f"dry run: {config_path} ({run.dir / 'command.sh'})")
        return result
    if not cli.exists():
        raise SystemExit(
            f"error: {cli} not found: create LLaMA-Factory's environment with `make setup-sft` "
            "(scripts/setup_sft_env.sh) or point train.sft.venv at one"
        )
    if problem := _cuda_problem(sft):
        raise SystemExit(f"error: {problem}")
    try:  # LLaMA-Factory writes a checkpoint per epoch, weights and optimiser state: room for all of them
        floor = sft.get("min_free_gib") or 0
        check_disk(train["output_dir"], floor, sft_need(train), "train.sft", SFT_DISK_FIX)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    log.info("starting LLaMA-Factory: %s", shlex.join(cmd))
    rc = stream(cmd, run.dir / "llamafactory.log", env)
    if rc != 0:
        raise RuntimeError(f"llamafactory-cli exited with status {rc}; see {run.dir / 'llamafactory.log'}")
    record = checkpoint_record(Path(train["output_dir"]))
    if not record["weights"]:
        raise RuntimeError(f"LLaMA-Factory finished but left no weights in {train['output_dir']}")
    state = Path(train["output_dir"]) / "trainer_state.json"
    choice = sft_selection(train["output_dir"], json.loads(state.read_text())) if state.exists() else None
    if choice is not None:
        record["selected"] = choice
        print(f"SFT checkpoint chosen by {choice['metric']}: step {choice['step']}, {choice['value']}")
    (run.dir / "checkpoint.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"SFT checkpoint: {record['path']}")
    return {**result, "checkpoint": record["path"], **(record.get("results") or {})}


def versions(cfg) -> dict[str, str]:
    """LLaMA-Factory's version in train.sft.venv: what computes the model."""
    return env_versions(venv_of(cfg.train.sft.venv), ("llamafactory",))


TASK = Task(run, problems=problems, versions=versions)
