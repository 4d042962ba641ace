"""task=train_grpo: GRPO on the memory model with VERL 0.9.1 (paper Section 3.3, Table 10).

Builds the VERL overrides from train.grpo (+ train.reward for the reward kwargs), writes them to
overrides.txt and command.sh, then runs `python -m verl.trainer.main_ppo` as a subprocess, streaming its
output into the console and verl.log. `train.grpo.dry_run=true` stops after writing the files. On one
node it first checks that the GPUs are there: VERL itself would wait for them without end.
After training, the checkpoint is chosen on the validation split (checkpoint_select.select_rl_checkpoint)
and recorded in <checkpoint_dir>/selected_checkpoint.json.
Run with +experiment=train_grpo train.grpo.rl_data_dir=<a build_rl run directory> train.grpo.model=<SFT>.
"""

from __future__ import annotations

import logging
import shlex
from pathlib import Path

from omegaconf import OmegaConf

from lazymem import tracking
from lazymem.llm.backends import gpu_count
from lazymem.llm.llm_set import role_config
from lazymem.subproc import stream
from lazymem.train.checkpoint_select import select_rl_checkpoint
from lazymem.train.grpo_config import command, overrides

log = logging.getLogger(__name__)


def run(cfg, run) -> dict:
    g = OmegaConf.to_container(cfg.train.grpo, resolve=True)
    g["project_name"] = g["project_name"] or tracking.options(cfg).get("project")  # the run's own project
    # VERL logs its training steps to W&B when this run is tracked (logger=wandb), else not at all
    loggers = [x for x in g["logger"] if x != "wandb"]
    g["logger"] = [*loggers, "wandb"] if tracking.trainer_reports(cfg) else loggers
    reward = cfg.train.get("reward")
    reward = OmegaConf.to_container(reward, resolve=True) if reward is not None else None
    if reward is not None:  # the quality judge is the reward_judge role; the reward workers get it resolved
        cache = cfg.llm.cache_path if cfg.llm.get("cache", True) else None
        reward["judge"] |= {"llm": role_config(cfg.llm, "reward_judge"), "cache_path": cache}
    try:
        ovr = overrides(g, reward)
    except ValueError as e:  # a missing input (data, SFT checkpoint) or an inconsistent batch
        raise SystemExit(f"error: {e}") from None
    cmd = command(ovr, g.get("python"))
    (run.dir / "overrides.txt").write_text("\n".join(ovr) + "\n", encoding="utf-8")
    (run.dir / "command.sh").write_text("#!/bin/sh\n" + shlex.join(cmd) + "\n", encoding="utf-8")
    result = {"overrides": len(ovr), "dry_run": bool(g["dry_run"]), "command": str(run.dir / "command.sh")}
    if g["dry_run"]:
        print(f"dry run: {len(ovr)} overrides -> {run.dir / 'command.sh'}")
        return result
    if g.get("python") and not Path(g["python"]).expanduser().exists():
        raise SystemExit(
            f"error: train.grpo.python = {g['python']!r} does not exist: build the RL environment with "
            "scripts/setup_gpu_env.sh on the GPU node, or point train.grpo.python at one"
        )
    gpus, wanted = gpu_count(), int(g["n_gpus_per_node"])
    if int(g["nnodes"]) == 1 and gpus < wanted:  # VERL would wait for them forever
        raise SystemExit(
            f"error: train_grpo needs {wanted} GPUs on this node (train.grpo.n_gpus_per_node), found {gpus}; "
            "train.grpo.dry_run=true writes the command without running it"
        )
    log.info("starting VERL: %s", shlex.join(cmd[:3]))
    rc = stream(cmd, run.dir / "verl.log", tracking.subprocess_env(cfg, run.dir, name=f"{run.dir.name}-grpo"))
    result["returncode"] = rc
    if rc != 0:
        raise RuntimeError(f"VERL exited with status {rc}; see {run.dir / 'verl.log'}")
    if not g["curriculum"]:  # VERL's own trainer writes no validation log
        log.warning("no checkpoint chosen: the validation log needs train.grpo.curriculum=true")
        return result
    choice = select_rl_checkpoint(g["checkpoint_dir"], g["select_metric"])
    print(f"selected RL checkpoint: {choice['path']} ({choice['metric']} = {choice['value']})")
    return {**result, "selected_checkpoint": choice["path"], "selected_step": choice["step"]}
