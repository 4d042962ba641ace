"""Training's GPUs (lazymem/gpu/training.py): VERL's GPUs and the reward judge's, from placement.train, and
the judge's context checked against its GPU. No GPU, no model download: the model directories hold only the
real architectures' config.json."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from lazymem.conf import CONF_DIR
from lazymem.gpu.model_memory import kv_gib
from lazymem.gpu.tenants import judge_tenant
from lazymem.gpu.training import training

from helpers_gpu import H100
from helpers_llm import MODEL_CONFIGS, gpus


def grpo(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=["+experiment=train_grpo", *overrides])


def test_training_gives_verl_its_gpus_and_the_reward_judge_one_of_its_own(models):
    plan, found = training(grpo(), gpus(4, H100))
    assert (plan, found) == ({"grpo": [0, 1], "reward_judge": [2]}, [])
    remote = "llm.roles.reward_judge.base_url=http://judge.example:8000/v1"
    assert training(grpo(remote), gpus(2, H100)) == ({"grpo": [0, 1]}, [])  # the judge is elsewhere
    assert training(grpo('placement.train.grpo="1,2"', "placement.train.reward_judge=0"), gpus(4))[1] == []


def test_the_papers_two_gpus_leave_a_judge_on_this_node_no_gpu(models):
    """VERL took both GPUs of gpu2 while the reward judge was to run on this node too."""
    plan, found = training(grpo(), gpus(2, H100))
    assert found == [
        "reward_judge takes GPUs [2] (placement.train.reward_judge), 2 is not visible (2 visible): run it on "
        "a node with 3 GPUs, or serve the judge on another node and pass llm.roles.reward_judge.base_url=..."
    ]
    (found,) = training(grpo("placement.train.reward_judge=1"), gpus(4))[1]
    assert (
        found
        == "placement.train.reward_judge = [1] is one of VERL's GPUs [0, 1]: give the judge a GPU of its own"
    )


def test_the_reward_judges_context_fits_an_80gb_gpu_and_qwen3s_own_does_not(models):
    """Qwen3-32B's own 40,960 tokens need 10 GiB of KV cache: vLLM would not start at 0.9 of 80 GB."""
    judge = judge_tenant(grpo())
    assert judge.tokens == 16384 and judge.need() <= 0.9 * H100
    own = kv_gib(models["Qwen3-32B"], MODEL_CONFIGS["Qwen3-32B"]["max_position_embeddings"])
    assert own == pytest.approx(10.0) and judge.need() - judge.kv + own > 0.9 * H100
    (found,) = training(grpo("llm.roles.reward_judge.context_tokens=40960"), gpus(3, H100))[1]
    assert "needs 76.4 GiB with a 40960-token context (llm.roles.reward_judge.context_tokens)" in found
