"""task=train_grpo: GRPO on the memory model with VERL 0.9.1 (paper Section 3.3, Table 10).

Builds the VERL overrides from train.grpo (+ train.reward for the reward kwargs), writes them to
overrides.txt and command.sh, then runs `python -m verl.trainer.main_ppo` as a subprocess, streaming its
output into the console and verl.log. `train.grpo.dry_run=true` stops after writing the files. Before VERL
starts it checks what VERL would otherwise fail on late or wait for without end: the GPUs (VERL's own,
placement.train.grpo, and the reward judge's when it is served on this node), flash_attn in VERL's
environment, and the quality-reward judge answering (GET /v1/models). VERL gets its own
CUDA_VISIBLE_DEVICES, so it never takes the judge's GPU.
After training, the checkpoint is chosen on the validation split (checkpoint_select.select_rl_checkpoint)
and recorded in <checkpoint_dir>/selected_checkpoint.json.
Run with +experiment=train_grpo train.grpo.rl_data_dir=<a build_rl run directory> train.grpo.model=<SFT>.
"""

from __future__ import annotations

import json
import logging
import shlex
import urllib.parse
import urllib.request
from pathlib import Path

from omegaconf import OmegaConf

from lazymem import tracking
from lazymem.llm.backends import gpu_count
from lazymem.llm.llm_set import role_config
from lazymem.llm.servers import VllmServer, visible_devices
from lazymem.placement import gpu_inventory, training
from lazymem.preflight import rl_env_problems, stop
from lazymem.subproc import stream
from lazymem.train.checkpoint_select import select_rl_checkpoint
from lazymem.train.grpo_config import command, overrides
from lazymem.train.sft_data import check_response_cap

log = logging.getLogger(__name__)
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def judge_command(cfg, gpu: int | None) -> str:
    """The shell command that serves the quality-reward judge as ``llm.roles.reward_judge`` expects it:
    ``llm.common``'s model and vLLM options, the role's served name and port, ``--max-model-len`` its
    ``context_tokens``, on GPU `gpu` (an index among the visible GPUs)."""
    rc = role_config(cfg.llm, "reward_judge")
    vllm = rc.get("vllm") or {}
    url = urllib.parse.urlsplit(rc["base_url"])
    keep = ("python", "dtype", "reasoning_parser", "reasoning_config", "enable_prefix_caching")
    server = VllmServer(
        str(rc["model"]),
        rc["served_name"],
        ".",
        host=url.hostname or "127.0.0.1",
        port=url.port or 8000,
        max_model_len=rc.get("context_tokens"),
        gpu_memory_utilization=0.9,
        **{k: vllm[k] for k in keep if k in vllm},
    )
    where = "" if gpu is None else f"CUDA_VISIBLE_DEVICES={visible_devices(str(gpu))} "
    return where + shlex.join(server.command)


def judge_answers(rc: dict) -> str | None:
    """None when the judge's server lists its served name at GET /v1/models, else what went wrong."""
    try:
        with _NO_PROXY.open(rc["base_url"].rstrip("/") + "/models", timeout=10) as r:
            ids = [m.get("id") for m in json.load(r).get("data", [])]
    except (OSError, ValueError, AttributeError) as e:
        return f"no answer from {rc['base_url']}/models ({e})"
    return None if rc["served_name"] in ids else f"{rc['base_url']} serves {ids}, not {rc['served_name']!r}"


def _before_verl(cfg, g: dict, reward: dict | None) -> dict[str, str]:
    """Stop with every problem VERL would meet late; else VERL's environment: its CUDA_VISIBLE_DEVICES."""
    plan, found = training(cfg, gpu_inventory())
    found += rl_env_problems(g.get("python"))
    if reward is not None:
        rc = role_config(cfg.llm, "reward_judge")
        if (why := judge_answers(rc)) is not None:
            judge_gpu = plan.get("reward_judge", [None])[0]
            found.append(
                f"the quality-reward judge (llm.roles.reward_judge) does not answer: {why}. Start it before "
                f"training, e.g. {judge_command(cfg, judge_gpu)}, or point llm.roles.reward_judge.base_url "
                "at a running one"
            )
    stop(found)
    return {"CUDA_VISIBLE_DEVICES": visible_devices(",".join(map(str, plan["grpo"])))}


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
        check_response_cap(g["model"], g["max_response_length"], g["max_sft_over_cap"])  # SFT targets fit?
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
    gpus = _before_verl(cfg, g, reward)
    line = f"CUDA_VISIBLE_DEVICES={gpus['CUDA_VISIBLE_DEVICES']} {shlex.join(cmd)}"
    (run.dir / "command.sh").write_text(f"#!/bin/sh\n{line}\n", encoding="utf-8")
    log.info("starting VERL on GPUs %s: %s", gpus["CUDA_VISIBLE_DEVICES"], shlex.join(cmd[:3]))
    env = tracking.subprocess_env(cfg, run.dir, name=f"{run.dir.name}-grpo") | gpus
    rc = stream(cmd, run.dir / "verl.log", env)
    result["returncode"] = rc
    if rc != 0:
        raise RuntimeError(f"VERL exited with status {rc}; see {run.dir / 'verl.log'}")
    if not g["curriculum"]:  # VERL's own trainer writes no validation log
        log.warning("no checkpoint chosen: the validation log needs train.grpo.curriculum=true")
        return result
    choice = select_rl_checkpoint(g["checkpoint_dir"], g["select_metric"])
    print(f"selected RL checkpoint: {choice['path']} ({choice['metric']} = {choice['value']})")
    return {**result, "selected_checkpoint": choice["path"], "selected_step": choice["step"]}
