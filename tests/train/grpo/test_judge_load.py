"""Phase 2's load on the quality-reward judge (lazymem/train/grpo/judge_load.py): calls a step, requests in
flight at once and what the judge's server holds, for paper mode's configuration composed with Hydra on a
faked GPU node (the paper's model directories hold their config.json only), each number derived here from
the config it comes from."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import yaml

from lazymem.conf import CONF_DIR
from lazymem.gpu.model_memory import kv_gib
from lazymem.gpu.tenants import judge_tenant
from lazymem.gpu.training import training
from lazymem.llm.llm_set import role_config
from lazymem.tokens import chat_tokens
from lazymem.train.grpo.engine import Launch
from lazymem.train.grpo.judge_load import VLLM_DEFAULT_SEQS, judge_gpu, judge_load
from lazymem.train.grpo.quality_judge import JudgeItem, build_messages, load_template
from lazymem.train.grpo.trl.engine import TrlEngine
from lazymem.train.grpo.verl.engine import VerlEngine

from helpers_llm import gpus, paper_model_dirs
from helpers_train import compose_train_grpo

# the judge at the other paper roles' concurrency, more than its server holds at once
OVER = "llm.roles.reward_judge.concurrency=64"
FIX = re.compile(r"Lower llm\.roles\.reward_judge\.concurrency to (\d+) \((\d+) in flight\)")


@pytest.fixture
def models(tmp_path, monkeypatch):
    paper_model_dirs(tmp_path, monkeypatch)
    return tmp_path


def paper(tmp_path, *overrides: str):
    """+experiment=train_grpo (VERL, paper mode's judge) as the CLI composes it."""
    return compose_train_grpo(tmp_path, "train.grpo.model=/models/sft", *overrides)


def load_on(cfg, tmp_path, node=None, engine=None):
    """judge_load as train_grpo computes it: the engine's launch, the GPU plan on `node` (None: no GPU)."""
    from lazymem.tasks.train_grpo import settings

    engine_, grpo, reward = settings(cfg)
    launch = (engine or engine_).launch(grpo, reward, tmp_path)
    plan = training(cfg, node)[0] if node else {}
    return judge_load(cfg, launch, judge_gpu(plan, node or []))


def test_paper_modes_judge_load_on_80_gb_gpus(models):
    """32 prompts x 8 rollouts x 8-message windows; VERL's 8 reward workers x the role's concurrency in
    flight; the 32B judge's KV cache on its 80 GB GPU holds 24 calls: paper mode's default concurrency is
    the largest that fits, and the 64 of the other paper roles would be stopped with that fix."""
    cfg = paper(models)
    node = gpus(4, 79.6)
    load = load_on(cfg, models, node)
    g, rc = cfg.train.grpo, role_config(cfg.llm, "reward_judge")
    assert load.calls_per_step == g.train_batch_size * g.rollout_n * g.data.max_len
    assert load.processes == g.reward_workers and load.processes_key == "train.grpo.reward_workers"
    assert load.in_flight == g.reward_workers * rc["concurrency"]
    # the KV cache the plan leaves the judge on its GPU (the one after VERL's), in tokens of its model
    gpu = node[len(training(cfg, node)[0]["grpo"])]
    per_token = kv_gib(rc["model"], 1, rc["vllm"]["dtype"])
    assert load.kv_tokens == int(judge_tenant(cfg).kv_budget(gpu) / per_token)
    empty = JudgeItem("", None, "", None, {"role": "user", "content": "", "timestamp": ""}, "")
    template = chat_tokens(build_messages(empty, load_template(None)))
    assert load.call_tokens == template + rc["decoding"]["max_tokens"]
    assert load.capacity == min(load.kv_tokens // load.call_tokens, VLLM_DEFAULT_SEQS)
    assert load.kv_tokens // rc["context_tokens"] < load.capacity  # the longest calls: fewer at once
    assert load.problems == [] and load.in_flight <= load.capacity
    over = load_on(paper(models, OVER), models, node)
    (problem,) = over.problems
    per, total = map(int, FIX.search(problem).groups())
    assert per == over.capacity // g.reward_workers == rc["concurrency"] and total == per * g.reward_workers
    assert f"but its server holds at most {over.capacity}" in problem and "timeout_s 180 s" in problem
    report = "\n".join(load.lines)
    assert f"up to {load.calls_per_step} calls a training step" in report
    assert f"a KV cache of {load.kv_tokens} tokens" in report


def test_the_concurrency_the_fix_names_holds_and_one_more_does_not(models):
    node = gpus(4, 79.6)
    (problem,) = load_on(paper(models, OVER), models, node).problems
    per = int(FIX.search(problem)[1])
    fits = load_on(paper(models, f"llm.roles.reward_judge.concurrency={per}"), models, node)
    assert fits.problems == [] and fits.in_flight <= fits.capacity
    over = load_on(paper(models, f"llm.roles.reward_judge.concurrency={per + 1}"), models, node)
    assert len(over.problems) == 1 and over.in_flight > over.capacity
    # a GPU with more memory holds more at the same concurrency (the other fix the problem names)
    larger = load_on(paper(models, f"llm.roles.reward_judge.concurrency={per + 1}"), models, gpus(4, 139.8))
    assert larger.problems == [] and larger.capacity > over.capacity


def test_fewer_reward_workers_than_the_server_holds_at_one_each(models):
    """A server that holds fewer calls than VERL has reward workers: the fix lowers the workers too."""
    cfg = paper(models, "llm.common.vllm.max_num_seqs=4")  # 4 at once, whatever the KV cache holds
    (problem,) = load_on(cfg, models, gpus(4, 79.6)).problems
    assert "llm.roles.reward_judge.vllm.max_num_seqs 4" in problem
    assert "Lower train.grpo.reward_workers to 4 and llm.roles.reward_judge.concurrency to 1" in problem
    workers = paper(models, "llm.common.vllm.max_num_seqs=4", "train.grpo.reward_workers=4")
    assert load_on(workers, models, gpus(4, 79.6)).problems != []  # 4 x concurrency 3 still
    fixed = paper(
        models,
        "llm.common.vllm.max_num_seqs=4",
        "train.grpo.reward_workers=4",
        "llm.roles.reward_judge.concurrency=1",
    )
    assert load_on(fixed, models, gpus(4, 79.6)).problems == []


def test_without_the_judges_gpu_its_capacity_is_unknown_unless_max_num_seqs_says(models):
    """No GPU on this node, or a judge served elsewhere: its KV cache is not guessed and nothing is refused;
    a max_num_seqs set for its server still bounds it."""
    cfg = paper(models)
    load = load_on(cfg, models)
    assert load.kv_tokens is None and load.capacity is None and load.problems == []
    assert "its KV cache is unknown (the judge is not on this node's GPU plan" in load.lines[1]
    elsewhere = paper(models, "llm.roles.reward_judge.base_url=http://judge-node:8000/v1")
    assert load_on(elsewhere, models, gpus(4, 79.6)).kv_tokens is None
    bounded = load_on(paper(models, "llm.common.vllm.max_num_seqs=16"), models)
    (problem,) = bounded.problems
    per = int(FIX.search(problem)[1])
    assert per == 16 // cfg.train.grpo.reward_workers


def test_trl_calls_the_reward_from_one_process(models):
    """TRL's GRPOTrainer awaits the reward on one event loop: in flight is the role's concurrency."""
    cfg = paper(models, "train/grpo=trl", OVER)
    load = load_on(cfg, models, gpus(2, 79.6), engine=TrlEngine())
    assert load.processes == 1 and load.in_flight == role_config(cfg.llm, "reward_judge")["concurrency"]
    (problem,) = load.problems
    assert int(FIX.search(problem)[1]) == load.capacity  # one process: the concurrency is the capacity


def test_an_engine_that_does_not_say_counts_as_one_process(models):
    class Quiet(VerlEngine):
        def launch(self, grpo, reward, run_dir):
            return Launch(["true"], run_dir / "x.log", 2, True, False)

    load = load_on(paper(models, OVER), models, gpus(4, 79.6), engine=Quiet())
    assert load.processes is None and load.in_flight == 64
    assert "1 reward processes (unknown: counted as 1)" in load.lines[0]
    assert int(FIX.search(load.problems[0])[1]) == load.capacity


def test_verl_reward_workers_default_is_verls_own():
    """train.grpo.reward_workers keeps VERL 0.9.1's reward.num_workers default (its reward.yaml)."""
    spec = importlib.util.find_spec("verl")
    if spec is None:
        pytest.skip("verl is not installed")
    verl_yaml = Path(spec.submodule_search_locations[0]) / "trainer" / "config" / "reward" / "reward.yaml"
    ours = yaml.safe_load((CONF_DIR / "train" / "grpo" / "verl.yaml").read_text())
    assert ours["reward_workers"] == yaml.safe_load(verl_yaml.read_text())["num_workers"]


def test_a_managed_judge_is_a_server_per_reward_process(models):
    """A managed backend (not an endpoint) starts a server in every reward process: each gets one loop's
    concurrency, and its KV cache is not this node's plan."""
    cfg = paper(models, "llm.roles.reward_judge.backend=vllm", "llm.common.vllm.max_num_seqs=16", OVER)
    load = load_on(cfg, models, gpus(4, 79.6))
    assert load.managed and load.kv_tokens is None and load.capacity == 16
    assert load.in_flight == role_config(cfg.llm, "reward_judge")["concurrency"]
    assert "each reward process starts a vllm server of its own" in load.lines[1]
    assert int(FIX.search(load.problems[0])[1]) == 16
