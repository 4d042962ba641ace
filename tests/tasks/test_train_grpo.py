"""task=train_grpo through the CLI up to VERL's launch: the dry run's overrides and command, and the stops
before it (no SFT checkpoint, too few GPUs, no RL environment)."""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
from collections import namedtuple
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
import torch

from lazymem.cuda_env import cuda_torch_problem
from lazymem.gpu.budget import MAX_UTIL
from lazymem.gpu.tenants import judge_tenant
from lazymem.gpu.training import training
from lazymem.llm.managed_server import free_port
from lazymem.preflight import PreflightError
from lazymem.tasks import train_grpo
from lazymem.train import checkpoint_disk
from lazymem.train.grpo.engine import Launch

from helpers import run_cli
from helpers_llm import gpus, paper_model_dirs
from helpers_train import compose_train_grpo


def test_train_grpo_without_an_sft_checkpoint_stops_and_says_how_to_pass_it(tmp_path):
    proc = run_cli(
        "+experiment=train_grpo",
        f"train.grpo.rl_data_dir={tmp_path}",
        "train.grpo.dry_run=true",
        f"hydra.run.dir={tmp_path / 'run'}",
        env={"LAZYMEM_SFT_MODEL": None},
    )
    assert proc.returncode != 0
    assert "train.grpo.model=<the `path` in a train_sft run's checkpoint.json>" in proc.stderr
    assert not (tmp_path / "run" / "command.sh").exists()


def test_train_grpo_dry_run(tmp_path):
    proc = run_cli(
        "+experiment=train_grpo",
        f"train.grpo.rl_data_dir={tmp_path}",
        "train.grpo.model=/models/sft",
        "train.grpo.dry_run=true",
        "train.grpo.python=/envs/gpu-rl/bin/python",  # the GPU nodes' RL environment runs VERL
        "logger=wandb",
        "logger.project=memproj",  # VERL reports to the launching run's W&B project
        f"hydra.run.dir={tmp_path / 'run'}",
        env={"WANDB_MODE": "offline"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = (tmp_path / "run" / "overrides.txt").read_text().splitlines()
    assert "trainer.project_name=memproj" in lines
    (loggers,) = [x for x in lines if x.startswith("trainer.logger=")]
    assert "console" in loggers and "wandb" in loggers  # logger=wandb: VERL logs its steps there too
    assert "algorithm.adv_estimator=grpo" in lines and "trainer.n_gpus_per_node=2" in lines
    (judge,) = [x for x in lines if x.startswith("+reward.custom_reward_function.reward_kwargs.judge.llm=")]
    assert "backend:endpoint" in judge and "thinking_budget:512" in judge  # llm.roles.reward_judge, resolved
    assert "/envs/gpu-rl/bin/python -m verl.trainer.main_ppo" in (tmp_path / "run" / "command.sh").read_text()


def test_train_grpo_without_the_gpus_stops_before_starting_verl(tmp_path):
    proc = run_cli(
        "+experiment=train_grpo",
        f"train.grpo.rl_data_dir={tmp_path}",
        "train.grpo.model=/models/sft",
        "train.grpo.n_gpus_per_node=1024",  # more than any machine running this test has
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert proc.returncode != 0
    assert "train_grpo needs 1024 GPUs on this node (train.grpo.n_gpus_per_node), found " in proc.stderr
    assert not (tmp_path / "run" / "verl.log").exists()
    assert (tmp_path / "run" / "command.sh").exists()  # the command is still there to inspect


def test_train_grpo_without_its_environment_says_how_to_build_it(tmp_path):
    proc = run_cli(
        "+experiment=train_grpo",
        f"train.grpo.rl_data_dir={tmp_path}",
        "train.grpo.model=/models/sft",
        f"train.grpo.python={tmp_path / 'no-env' / 'bin' / 'python'}",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "does not exist: build the RL environment with scripts/setup_gpu_env.sh" in proc.stderr
    assert not (tmp_path / "run" / "verl.log").exists()


# task=train_grpo's checks before VERL starts, on a faked GPU node (the inventory, the GPU count and a torch
# that reaches the GPUs are the only CUDA facts faked): the quality-reward judge answers, VERL's environment
# imports flash_attn, and VERL gets its own CUDA_VISIBLE_DEVICES, the GPUs of the job's plan
# (placement.train.grpo), never the judge's. VERL itself is a stand-in that records its environment. Kind:
# the command and environment a GPU run would start VERL with.


@pytest.fixture
def node(tmp_path, monkeypatch):
    """Four 80 GB GPUs, the job given the node's GPUs 4-7 (SLURM), the paper's model directories."""
    paper_model_dirs(tmp_path, monkeypatch)
    monkeypatch.setattr(train_grpo, "gpu_inventory", lambda: gpus(4, 79.6))
    monkeypatch.setattr(train_grpo, "gpu_count", lambda: 4)
    monkeypatch.setattr(train_grpo, "cuda_torch_problem", lambda *a: None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    free_gib(monkeypatch, 1000)  # room for VERL's 5 checkpoints of the 4B (247 GiB by the estimate)
    return tmp_path


def free_gib(monkeypatch, gib: float) -> None:
    """The free disk space the checkpoints' check sees (lazymem/train/checkpoint_disk.py)."""
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(checkpoint_disk.shutil, "disk_usage", lambda p: usage(0, 0, gib * 2**30))


def rl_python(tmp_path, flash_attn: bool):
    """VERL's environment: this Python (verl, lazymem), with or without a flash_attn module; `-m` (VERL's
    main_ppo) writes the environment it was given and exits."""
    stubs = tmp_path / "stubs"
    (stubs / "flash_attn").mkdir(parents=True)
    if flash_attn:
        (stubs / "flash_attn" / "__init__.py").write_text("")
    python = tmp_path / "rl" / "python"
    python.parent.mkdir()
    python.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = -m ]; then echo "$CUDA_VISIBLE_DEVICES" > {tmp_path / "verl_gpus"}; exit 0; fi\n'
        f'PYTHONPATH={stubs if flash_attn else ""} exec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    return python


class Judge:
    """A server that lists `served` at GET /v1/models, as the hand-started vLLM judge does."""

    def __init__(self, served: str):
        ids = json.dumps({"data": [{"id": served}]}).encode()

        class Models(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Length", str(len(ids)))
                self.end_headers()
                self.wfile.write(ids)

            def log_message(self, *args):
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Models)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.http.server_port}/v1"


def grpo(tmp_path, python, *overrides: str):
    more = ("train.grpo.curriculum=false", "train.grpo.min_free_gib=0")
    return compose_train_grpo(tmp_path, f"train.grpo.python={python}", *more, *overrides)


def test_the_judges_launch_command_fits_its_context_and_the_plan_gives_it_a_gpu(node):
    cfg = grpo(node, "/envs/rl/bin/python")
    command = train_grpo.judge_command(cfg, 2)
    assert command.startswith("CUDA_VISIBLE_DEVICES=6 .venv-gpu-serve/bin/python -m vllm.entrypoints.openai")
    for flag in ("--served-model-name qwen3-32b", "--port 8000", "--max-model-len 16384", "--dtype bfloat16"):
        assert flag in command
    assert "--reasoning-parser qwen3" in command  # the judge's thinking budget needs it


def test_the_judges_command_serves_the_max_num_seqs_its_load_check_counts(node):
    """The load check (grpo/judge_load.py) bounds the judge by the role's vllm.max_num_seqs: the command
    printed to serve it passes it on (null: vLLM's default, no flag)."""
    assert "--max-num-seqs" not in train_grpo.judge_command(grpo(node, "/envs/rl/bin/python"), 2)
    cfg = grpo(node, "/envs/rl/bin/python", "llm.common.vllm.max_num_seqs=16")
    assert " --max-num-seqs 16 " in train_grpo.judge_command(cfg, 2)


def test_the_judges_printed_share_is_the_one_its_fit_was_checked_at(node):
    """The plan passes a judge that needs up to gpu.budget.MAX_UTIL of its GPU; the command printed to serve
    it gives vLLM that share (on a 76 GiB GPU the 32B judge needs 0.93: vLLM's 0.9 would not start it)."""
    cfg = grpo(node, "/envs/rl/bin/python")
    plan, found = training(cfg, gpus(3, 76.0))
    assert found == []
    command = train_grpo.judge_command(cfg, plan["reward_judge"][0])
    share = float(command.split("--gpu-memory-utilization ")[1].split()[0])
    assert share == MAX_UTIL and share * 76.0 >= judge_tenant(cfg).need() > 0.9 * 76.0


def test_verl_does_not_start_without_flash_attn_or_an_answering_judge(node):
    run = SimpleNamespace(dir=node / "run")
    run.dir.mkdir()
    cfg = grpo(node, rl_python(node, flash_attn=False))
    with pytest.raises(PreflightError) as stop:
        train_grpo.run(cfg, run)
    message = stop.value.code
    assert "cannot import flash_attn (ModuleNotFoundError" in message
    assert "the quality-reward judge (llm.roles.reward_judge) does not answer: no answer from " in message
    assert "e.g. CUDA_VISIBLE_DEVICES=6 .venv-gpu-serve/bin/python -m vllm" in message  # on the plan's GPU 2
    assert not (node / "verl_gpus").exists() and not (run.dir / "verl.log").exists()


def test_verl_gets_the_plans_gpus_and_never_the_judges(node):
    judge = Judge("qwen3-32b")
    run = SimpleNamespace(dir=node / "run")
    run.dir.mkdir()
    cfg = grpo(node, rl_python(node, flash_attn=True), f"llm.roles.reward_judge.base_url={judge.url}")
    train_grpo.run(cfg, run)
    assert (node / "verl_gpus").read_text().strip() == "4,5"  # the job's GPUs 0 and 1 under SLURM
    assert (run.dir / "command.sh").read_text().splitlines()[1].startswith("CUDA_VISIBLE_DEVICES=4,5 ")
    judge.http.shutdown()


def test_a_judge_that_serves_another_model_is_named(node):
    judge = Judge("qwen3-8b")
    run = SimpleNamespace(dir=node / "run")
    run.dir.mkdir()
    cfg = grpo(node, rl_python(node, flash_attn=True), f"llm.roles.reward_judge.base_url={judge.url}")
    with pytest.raises(PreflightError, match=r"serves \['qwen3-8b'\], not 'qwen3-32b'"):
        train_grpo.run(cfg, run)
    judge.http.shutdown()


def test_phase_2s_load_on_the_judge_is_bounded_before_verl_starts(node, monkeypatch, caplog):
    """N25: with the curriculum on, phase 2 sends the judge VERL's reward workers x the role's concurrency
    requests at once; more than the judge's KV cache on its planned GPU holds stops training (and a chain's
    check) before VERL starts, naming the concurrency that fits; with that one VERL starts, the bound
    logged. Without the curriculum no phase 2 comes, and nothing is checked."""
    monkeypatch.setattr(train_grpo, "import_problems", lambda *a: [])  # the environment's tests are above
    judge = Judge("qwen3-32b")
    run = SimpleNamespace(dir=node / "run")
    run.dir.mkdir()
    python = rl_python(node, flash_attn=True)
    url = f"llm.roles.reward_judge.base_url={judge.url}"
    over = "llm.roles.reward_judge.concurrency=64"  # the other paper roles' concurrency
    cfg = grpo(node, python, url, "train.grpo.curriculum=true", over)
    with pytest.raises(PreflightError) as stop:
        train_grpo.run(cfg, run)
    workers, concurrency = cfg.train.grpo.reward_workers, cfg.llm.roles.reward_judge.concurrency
    assert f"up to {workers * concurrency} requests at once ({workers} reward processes" in stop.value.code
    fits = re.search(r"Lower llm\.roles\.reward_judge\.concurrency to (\d+) ", stop.value.code)
    assert fits and 1 <= int(fits[1]) < concurrency
    assert not (node / "verl_gpus").exists()
    (found,) = train_grpo.problems(cfg)
    assert fits[0] in found
    assert train_grpo.problems(grpo(node, python, url, over)) == []  # curriculum=false: no phase 2
    choice = {"path": "p", "metric": "reward", "value": 0.0, "step": 1}
    monkeypatch.setattr(train_grpo, "select_rl_checkpoint", lambda *a: choice)
    caplog.set_level(logging.INFO, logger=train_grpo.__name__)
    fixed = f"llm.roles.reward_judge.concurrency={fits[1]}"
    cfg = grpo(node, python, url, "train.grpo.curriculum=true", fixed)
    train_grpo.run(cfg, run)
    assert (node / "verl_gpus").read_text().strip() == "4,5"
    logged = [r.getMessage() for r in caplog.records if r.name == train_grpo.__name__]
    assert any(m.startswith("quality judge in phase 2: up to ") for m in logged)
    assert any(m.startswith("the judge's server holds at most ") for m in logged)
    judge.http.shutdown()


def compose_engine(tmp_path, engine: str, *overrides: str):
    more = (f"train/grpo={engine}", "train.grpo.model=/models/sft", "train.grpo.dry_run=true")
    return compose_train_grpo(tmp_path, *more, *overrides)


@pytest.mark.parametrize(
    ("engine", "own_file", "entry"),
    [
        ("verl", "overrides.txt", "verl.trainer.main_ppo"),
        ("trl", "trl_config.json", "lazymem.train.grpo.trl.run"),
    ],
)
def test_the_task_runs_the_engine_its_config_names(tmp_path, engine, own_file, entry):
    """train/grpo=verl|trl composes, and the task's engine is the config's _target_ (no name branch)."""
    cfg = compose_engine(tmp_path, engine)
    assert cfg.train.grpo.engine._target_.endswith("Engine")
    run = SimpleNamespace(dir=tmp_path / "run")
    run.dir.mkdir()
    result = train_grpo.run(cfg, run)
    assert result["engine"] == engine and result["dry_run"]
    assert (run.dir / own_file).is_file()
    assert f" -m {entry} " in (run.dir / "command.sh").read_text()
    # a class of one's own, named by _target_, runs the same way
    cfg.train.grpo.engine._target_ = f"{__name__}.EchoEngine"
    assert train_grpo.run(cfg, run)["engine"] == "echo"
    assert (run.dir / "command.sh").read_text().splitlines()[1] == "echo /models/sft"


class EchoEngine:
    """An engine of one's own: the GrpoEngine contract and nothing else."""

    name = "echo"
    env_fix = ""

    def env_modules(self, grpo):
        return ()

    def launch(self, g, reward, run_dir):
        return Launch(["echo", g["model"]], run_dir / "echo.log", 0, False, False)


def test_too_little_disk_space_stops_naming_free_needed_and_the_directory(node):
    judge = Judge("qwen3-32b")
    run = SimpleNamespace(dir=node / "run")
    run.dir.mkdir()
    cfg = grpo(
        node,
        rl_python(node, flash_attn=True),
        f"llm.roles.reward_judge.base_url={judge.url}",
        "train.grpo.min_free_gib=1000000000",
    )
    with pytest.raises(SystemExit) as stop:
        train_grpo.run(cfg, run)
    assert "GiB free for checkpoints in " + str((node / "ckpt").resolve()) in stop.value.code
    assert "train.grpo.min_free_gib asks for 1e+09 GiB" in stop.value.code
    assert not (node / "verl_gpus").exists()  # VERL never started
    judge.http.shutdown()


def test_too_little_disk_for_the_estimated_checkpoints_stops_before_verl_starts(node, monkeypatch):
    """N22: 150 GiB free passed the old flat floor (min_free_gib 100); VERL's five kept checkpoints of the
    4B SFT model (fp32 weights + AdamW moments, 12 bytes a parameter) need about 247 GiB."""
    judge = Judge("qwen3-32b")
    run = SimpleNamespace(dir=node / "run")
    run.dir.mkdir()
    cfg = grpo(
        node,
        rl_python(node, flash_attn=True),
        f"llm.roles.reward_judge.base_url={judge.url}",
        "train.grpo.min_free_gib=100",
    )
    free_gib(monkeypatch, 150)
    with pytest.raises(SystemExit) as stop:
        train_grpo.run(cfg, run)
    assert stop.value.code.startswith("error: only 150.0 GiB free for checkpoints in ")
    assert "need about 247 GiB more (5 checkpoints x 45.0 GiB (Qwen3-4B's 4.02B parameters" in stop.value.code
    assert not (node / "verl_gpus").exists()  # VERL never started
    judge.http.shutdown()


def test_with_a_ray_address_verl_joins_the_cluster_and_this_nodes_gpus_are_not_counted(node, monkeypatch):
    monkeypatch.setattr(train_grpo, "gpu_count", lambda: 0)  # a login node: the GPUs are the cluster's
    judge = Judge("qwen3-32b")
    run = SimpleNamespace(dir=node / "run")
    run.dir.mkdir()
    cfg = grpo(
        node,
        rl_python(node, flash_attn=True),
        f"llm.roles.reward_judge.base_url={judge.url}",
        "train.grpo.ray_address=ray://head:10001",
    )
    train_grpo.run(cfg, run)
    lines = (run.dir / "overrides.txt").read_text().splitlines()
    assert '+ray_kwargs.ray_init.address="ray://head:10001"' in lines
    assert "ray_kwargs.ray_init.num_cpus=null" in lines
    assert not (run.dir / "command.sh").read_text().splitlines()[1].startswith("CUDA_VISIBLE_DEVICES")
    judge.http.shutdown()


def test_the_chains_check_names_the_rl_environment_and_the_gpus_verl_needs(tmp_path, monkeypatch):
    """problems(cfg), which a chain runs before it starts: VERL's environment and GPUs; TRL on a CPU: none."""
    monkeypatch.setattr(train_grpo, "gpu_count", lambda: 0)
    monkeypatch.setattr(
        train_grpo,
        "import_problems",
        lambda python, engine, grpo: [f"{python} cannot import {m}" for m in engine.env_modules(grpo)[1:]],
    )
    verl = train_grpo.problems(grpo(tmp_path, sys.executable, "train.grpo.model=/sft"))
    assert verl == [
        f"{sys.executable} cannot import flash_attn",
        "train_grpo needs 2 GPUs on this node (train.grpo.n_gpus_per_node), found 0",
    ]
    missing = train_grpo.problems(grpo(tmp_path, "/no/such/python", "train.grpo.model=/sft"))
    assert missing[0].startswith("train.grpo.python = '/no/such/python' does not exist")
    trl = grpo(
        tmp_path,
        sys.executable,
        "train.grpo.model=/sft",
        "train/grpo=trl",
        "train.grpo.n_gpus_per_node=0",
    )
    assert train_grpo.problems(trl) == []


def test_the_chains_check_asks_the_reward_judge_when_the_curriculum_can_reach_phase_2(tmp_path, monkeypatch):
    """problems(cfg) with train.grpo.curriculum=true: a judge endpoint that does not answer is named with the
    command that serves it, a hosted one without its key too (before any probe); an answering judge, or no
    curriculum (no phase 2, no judge call): nothing."""
    monkeypatch.delenv("LAZYMEM_TEST_JUDGE_KEY", raising=False)

    def check(url: str, *more: str) -> list[str]:  # TRL on a CPU (transformers' generate): no other problem
        trl = ("train.grpo.model=/sft", "train/grpo=trl", "train.grpo.n_gpus_per_node=0")
        trl += ("train.grpo.use_vllm=false",)
        return train_grpo.problems(
            grpo(tmp_path, sys.executable, *trl, f"llm.roles.reward_judge.base_url={url}", *more)
        )

    closed = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    (found,) = check(closed, "train.grpo.curriculum=true")
    assert found.startswith(
        f"the quality-reward judge (llm.roles.reward_judge) does not answer: no answer from {closed}/models"
    )
    assert "-m vllm.entrypoints.openai.api_server" in found and "--served-model-name qwen3-32b" in found
    assert check(
        closed, "train.grpo.curriculum=true", "++llm.roles.reward_judge.api_key_env=LAZYMEM_TEST_JUDGE_KEY"
    ) == [
        "llm.roles.reward_judge needs an API key: export LAZYMEM_TEST_JUDGE_KEY=... (it is read from the "
        "environment only)"
    ]
    assert check(closed) == []  # grpo(): curriculum=false
    judge = Judge("qwen3-32b")
    assert check(judge.url, "train.grpo.curriculum=true") == []
    judge.http.shutdown()


def test_a_failed_trainer_is_reported_by_its_own_last_error(tmp_path):
    log = tmp_path / "trl.log"
    log.write_text(
        "step 3\nTraceback (most recent call last):\n  File x\n"
        "(TaskRunner pid=12) lazymem.train.grpo.reward_metrics.JudgeErrorRateExceeded: "
        "judge error rate 0.2 > 0.05\n"
    )
    assert train_grpo.last_error(log) == "JudgeErrorRateExceeded: judge error rate 0.2 > 0.05"
    log.write_text("all fine\n")
    assert train_grpo.last_error(log) is None and train_grpo.last_error(tmp_path / "none.log") is None


@pytest.mark.skipif(torch.version.cuda is not None, reason="this environment's torch is a CUDA build")
def test_on_a_gpu_node_a_trainer_python_with_a_cpu_torch_is_named(node, monkeypatch):
    """N15: GRPO on GPUs from a Python whose torch is the CPU build (the core environment's, where
    train.grpo.python is null) is named with the RL environment's fix, before anything starts."""
    monkeypatch.setattr(train_grpo, "cuda_torch_problem", cuda_torch_problem)
    g = {"python": None}
    found = train_grpo._cuda_problem(g, SimpleNamespace(gpus=2))
    assert found == (
        f"{sys.executable} (runs train_grpo on GPUs) has torch {torch.__version__}, a CPU build: "
        "bash scripts/setup_gpu_env.sh rl, then LAZYMEM_RL_PYTHON=.venv-gpu-rl/bin/python"
    )
    assert train_grpo._cuda_problem(g, SimpleNamespace(gpus=0)) is None  # a CPU run, or a joined cluster's
