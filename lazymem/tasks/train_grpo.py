"""task=train_grpo: GRPO on the memory model (paper Section 3.3, Table 10) with the engine train.grpo names.

``train.grpo.engine._target_`` picks the engine (lazymem/train/grpo/engine.py's contract), one config of
the group train/grpo each (conf/train/grpo/). The engine writes its own files and names one command; this
task writes it to command.sh (``train.grpo.dry_run=true`` stops there) and runs it as a subprocess, streaming
its output into the console and the engine's log. Before it starts, the checks every engine shares: the
inputs, the SFT targets against the response cap, the GPUs (the engine's count on this node, the plan's
CUDA_VISIBLE_DEVICES: placement.train.grpo, never the judge's GPU), the modules the engine needs in its
Python (``env_modules``), the quality-reward judge answering (GET /v1/models) when it is an endpoint and,
when the curriculum can reach phase 2, holding the requests phase 2 sends at once (grpo/judge_load.py, its
bound logged), and free disk space for the checkpoints. After training, the checkpoint is chosen on the
validation split among the engine's kept checkpoints (grpo/checkpoints.select_rl_checkpoint) and recorded in
<checkpoint_dir>/selected_checkpoint.json with the engine's name and class.
Run with +experiment=train_grpo train.grpo.rl_data_dir=<a build_rl run directory> train.grpo.model=<SFT>.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
import sys
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

from hydra.utils import instantiate
from omegaconf import OmegaConf

from lazymem import tracking
from lazymem.chain.versions import env_versions, venv_of
from lazymem.cuda_env import cuda_torch_problem
from lazymem.gpu.budget import MAX_UTIL
from lazymem.gpu.inventory import gpu_inventory
from lazymem.gpu.training import training
from lazymem.llm.backends import get_backend, gpu_count
from lazymem.llm.llm_set import role_config
from lazymem.llm.vllm_server import VllmServer, visible_devices
from lazymem.preflight import import_problems, stop
from lazymem.subproc import stream
from lazymem.tasks.contract import Task
from lazymem.train.grpo.checkpoints import select_rl_checkpoint
from lazymem.train.grpo.engine import GrpoEngine, Launch, check_disk, check_inputs, engine_packages
from lazymem.train.grpo.judge_load import judge_gpu, judge_load
from lazymem.train.sft_data import check_response_cap, sft_thinking

log = logging.getLogger(__name__)
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def judge_command(cfg, gpu: int | None) -> str:
    """The shell command that serves the quality-reward judge as ``llm.roles.reward_judge`` expects it:
    ``llm.common``'s model and vLLM options, the role's served name and port, ``--max-model-len`` its
    ``context_tokens``, the GPU share the plan checks it fits (gpu.budget.MAX_UTIL), on GPU `gpu` (an index
    among the visible GPUs)."""
    rc = role_config(cfg.llm, "reward_judge")
    vllm = rc.get("vllm") or {}
    url = urllib.parse.urlsplit(rc["base_url"])
    keep = (
        "python",
        "dtype",
        "max_num_seqs",
        "reasoning_parser",
        "reasoning_config",
        "enable_prefix_caching",
    )
    server = VllmServer(
        str(rc["model"]),
        rc["served_name"],
        ".",
        host=url.hostname or "127.0.0.1",
        port=url.port or 8000,
        max_model_len=rc.get("context_tokens"),
        gpu_memory_utilization=MAX_UTIL,  # the share gpu.training checks the judge against
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


def judge_problems(cfg, gpu: int | None) -> list[str]:
    """What the quality-reward judge (``llm.roles.reward_judge``) misses: its backend's problems and, for an
    endpoint (a managed judge starts its server), an answer at GET /v1/models, else the command that
    serves it on GPU `gpu`."""
    rc = role_config(cfg.llm, "reward_judge")
    found = get_backend(rc).problems("llm.roles.reward_judge")
    if not found and rc.get("backend") == "endpoint" and (why := judge_answers(rc)) is not None:
        found.append(
            f"the quality-reward judge (llm.roles.reward_judge) does not answer: {why}. Start it before "
            f"training, e.g. {judge_command(cfg, gpu)}, or point llm.roles.reward_judge.base_url "
            "at a running one"
        )
    return found


def _before_training(
    cfg, engine: GrpoEngine, grpo: dict, reward: dict | None, launch: Launch
) -> dict[str, str]:
    """Stop with every problem the trainer would meet late; else its CUDA_VISIBLE_DEVICES (when the GPU plan
    gives it)."""
    found: list[str] = []
    plan: dict[str, list[int]] = {}
    inventory = gpu_inventory() if launch.plan_gpus and launch.gpus else []
    if launch.plan_gpus and launch.gpus:
        plan, found = training(cfg, inventory)
    found += import_problems(grpo.get("python"), engine, grpo)
    load = None
    if reward is not None:
        found += judge_problems(cfg, plan.get("reward_judge", [None])[0])
        if cfg.train.grpo.get("curriculum"):  # phase 2 calls the judge: its load (grpo/judge_load.py)
            load = judge_load(cfg, launch, judge_gpu(plan, inventory))
            found += load.problems
    stop(found)
    for line in load.lines if load else []:  # the bound, for the trainer's per-step reward/judge_s/mean
        log.info("%s", line)
    return {"CUDA_VISIBLE_DEVICES": visible_devices(",".join(map(str, plan["grpo"])))} if plan else {}


def problems(cfg) -> list[str]:
    """What this job would stop on, checked before a chain starts (lazymem/chain/preflight.py): the engine's
    settings, its Python and, where the engine needs them, the modules in it and the GPUs; when the
    curriculum can reach phase 2, the reward judge (:func:`judge_problems`: a chain must not pay for the
    teacher and SFT first) and its load (grpo/judge_load.py; the judge's KV cache where this node plans it).
    The inputs come from earlier stages and are checked when it starts."""
    engine, grpo, reward = settings(cfg)
    judge = judge_problems(cfg, None) if reward is not None and grpo.get("curriculum") else []
    with tempfile.TemporaryDirectory() as scratch:
        try:
            launch = engine.launch(grpo, reward, Path(scratch))
        except ValueError as e:
            return [str(e), *judge]
    if reward is not None and grpo.get("curriculum"):  # phase 2's load on the judge (grpo/judge_load.py)
        inventory = gpu_inventory() if launch.plan_gpus and launch.gpus else []
        plan = training(cfg, inventory)[0] if inventory else {}
        judge += judge_load(cfg, launch, judge_gpu(plan, inventory)).problems
    if missing := _python_problem(grpo.get("python")):
        return [missing, *judge]
    found = import_problems(grpo.get("python"), engine, grpo)
    return found + [p for p in [_gpu_problem(launch), _cuda_problem(grpo, launch)] if p] + judge


def _python_problem(python: str | None) -> str | None:
    """The trainer's Python, when one is named and absent."""
    if python and not Path(python).expanduser().exists():
        return (
            f"train.grpo.python = {python!r} does not exist: build the RL environment with "
            "scripts/setup_gpu_env.sh on the GPU node, or point train.grpo.python at one"
        )
    return None


def _gpu_problem(launch: Launch) -> str | None:
    """Fewer GPUs on this node than the engine asks for (its trainer would wait for them forever)."""
    if launch.gpus and (gpus := gpu_count()) < launch.gpus:
        return f"train_grpo needs {launch.gpus} GPUs on this node (train.grpo.n_gpus_per_node), found {gpus}"
    return None


def _cuda_problem(grpo: dict, launch: Launch) -> str | None:
    """On a GPU node, a trainer Python whose torch cannot reach the GPUs it trains on (the core
    environment's default torch, train.grpo.python null, is the CPU build)."""
    if not launch.gpus or not gpu_count():
        return None
    return cuda_torch_problem(grpo.get("python") or sys.executable, "train_grpo on GPUs", "rl")


def last_error(log: Path) -> str | None:
    """The trainer's own last exception line (e.g. JudgeErrorRateExceeded), so that the run's error, and a
    chain's, names the cause and not only an exit status; Ray's `(Actor pid=N)` prefix is dropped."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()[-300:]
    except OSError:
        return None
    for line in reversed(lines):
        if found := re.search(r"\b([A-Za-z_][\w.]*(?:Error|Exceeded|Exception)): (.+)$", line):
            return f"{found.group(1).rsplit('.', 1)[-1]}: {found.group(2).strip()}"[:500]
    return None


def settings(cfg) -> tuple[GrpoEngine, dict, dict | None]:
    """The engine, train.grpo as a dict for it, and train.reward with the judge's role resolved."""
    engine: GrpoEngine = instantiate(cfg.train.grpo.engine)
    grpo = OmegaConf.to_container(cfg.train.grpo, resolve=True)
    del grpo["engine"]
    # the run's own project
    grpo["project_name"] = grpo["project_name"] or tracking.options(cfg).get("project")
    grpo["reports"] = tracking.trainer_reports(cfg)  # the trainer logs to W&B when this run is tracked
    if grpo.get("enable_thinking") is None and grpo.get("model"):  # prompts formatted as the SFT data was
        grpo["enable_thinking"] = sft_thinking(grpo["model"])
    reward = cfg.train.get("reward")
    reward = OmegaConf.to_container(reward, resolve=True) if reward is not None else None
    if reward is not None:  # the quality judge is the reward_judge role; the reward gets it resolved
        cache = cfg.llm.cache_path if cfg.llm.get("cache", True) else None
        reward["judge"] |= {"llm": role_config(cfg.llm, "reward_judge"), "cache_path": cache}
    return engine, grpo, reward


def run(cfg, run) -> dict:
    engine, grpo, reward = settings(cfg)
    try:
        check_inputs(grpo)
        # the SFT targets fit the response cap?
        check_response_cap(grpo["model"], grpo["max_response_length"], grpo["max_sft_over_cap"])
        launch = engine.launch(grpo, reward, run.dir)
    except ValueError as e:  # a missing input (data, SFT checkpoint) or inconsistent settings
        raise SystemExit(f"error: {e}") from None
    (run.dir / "command.sh").write_text("#!/bin/sh\n" + shlex.join(launch.command) + "\n", encoding="utf-8")
    result = {
        "engine": engine.name,
        **launch.info,
        "dry_run": bool(grpo["dry_run"]),
        "command": str(run.dir / "command.sh"),
    }
    if grpo["dry_run"]:
        print(f"dry run ({engine.name}): {run.dir / 'command.sh'}")
        return result
    if missing := _python_problem(grpo.get("python")):
        raise SystemExit(f"error: {missing}")
    if short := _gpu_problem(launch):
        raise SystemExit(f"error: {short}; train.grpo.dry_run=true writes the command without running it")
    if problem := _cuda_problem(grpo, launch):
        raise SystemExit(f"error: {problem}")
    devices = _before_training(cfg, engine, grpo, reward, launch)
    try:
        check_disk(grpo["checkpoint_dir"], grpo["min_free_gib"], launch.disk)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    prefix = "".join(f"{k}={v} " for k, v in devices.items())
    line = prefix + shlex.join(launch.command)
    (run.dir / "command.sh").write_text(f"#!/bin/sh\n{line}\n", encoding="utf-8")
    log.info("starting %s: %s", engine.name, line)
    env = tracking.subprocess_env(cfg, run.dir, name=f"{run.dir.name}-grpo") | devices
    rc = stream(launch.command, launch.log, env)
    result["returncode"] = rc
    if rc != 0:
        cause = last_error(launch.log)
        raise RuntimeError(
            f"{engine.name} exited with status {rc}{f' ({cause})' if cause else ''}; see {launch.log}"
        )
    if not launch.validates:
        log.warning("no checkpoint chosen: the validation log needs train.grpo.curriculum=true")
        return result
    choice = select_rl_checkpoint(grpo["checkpoint_dir"], engine, grpo["select_metric"])
    print(f"selected RL checkpoint: {choice['path']} ({choice['metric']} = {choice['value']})")
    return {**result, "selected_checkpoint": choice["path"], "selected_step": choice["step"]}


def versions(cfg) -> dict[str, str]:
    """The packages of the engine train.grpo.engine names (every bundled engine's when none), in
    train.grpo.python's environment (null: this one)."""
    python = cfg.train.grpo.get("python")
    packages = engine_packages(OmegaConf.select(cfg.train.grpo, "engine._target_", default=None))
    return env_versions(venv_of(python) if python else None, packages)


TASK = Task(run, problems=problems, versions=versions)
