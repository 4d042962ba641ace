"""task=train_grpo: GRPO on the memory model with VERL 0.9.1 (paper Section 3.3, Table 10).

Builds the VERL overrides from train.grpo (+ train.reward for the reward kwargs), writes them to
overrides.txt and command.sh, then runs `python -m verl.trainer.main_ppo` as a subprocess, streaming its
output into the console and verl.log. `train.grpo.dry_run=true` stops after writing the files.
Run with +experiment=train_grpo train.grpo.rl_data_dir=<a build_rl run directory>.
"""

from __future__ import annotations

import logging
import shlex
import subprocess
import sys

from omegaconf import OmegaConf

from lazymem.train.grpo_config import command, overrides

log = logging.getLogger(__name__)


def run(cfg, run) -> dict:
    g = OmegaConf.to_container(cfg.train.grpo, resolve=True)
    reward = cfg.train.get("reward")
    reward = OmegaConf.to_container(reward, resolve=True) if reward is not None else None
    ovr = overrides(g, reward)
    cmd = command(ovr)
    (run.dir / "overrides.txt").write_text("\n".join(ovr) + "\n", encoding="utf-8")
    (run.dir / "command.sh").write_text("#!/bin/sh\n" + shlex.join(cmd) + "\n", encoding="utf-8")
    result = {"overrides": len(ovr), "dry_run": bool(g["dry_run"]), "command": str(run.dir / "command.sh")}
    if g["dry_run"]:
        print(f"dry run: {len(ovr)} overrides -> {run.dir / 'command.sh'}")
        return result
    log.info("starting VERL: %s", shlex.join(cmd[:3]))
    with open(run.dir / "verl.log", "w", encoding="utf-8") as logf:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        for line in proc.stdout:
            sys.stdout.write(line)
            logf.write(line)
        rc = proc.wait()
    result["returncode"] = rc
    if rc != 0:
        raise RuntimeError(f"VERL exited with status {rc}; see {run.dir / 'verl.log'}")
    return result
