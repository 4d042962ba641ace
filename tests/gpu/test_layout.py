"""Derived GPU plans (lazymem/gpu/layout.py) on fake GPU inventories: each paper experiment's models laid
out on the GPUs people have, the device keys and shares a GPU run would start its servers with. No GPU, no
model download: the model directories hold only the real architectures' config.json."""

from __future__ import annotations

import pytest

from lazymem.gpu.plans import describe, place
from lazymem.llm.llm_set import role_config

from helpers_gpu import A100_40, H100, H200, L40S, job, large
from helpers_llm import gpus

# the experiments whose tasks place models on GPUs; those that serve Qwen3-32B beside the embedder need two
# 80 GB GPUs (or one of 141 GB)
NEED_TWO = ["main_table", "radius_ablation", "stage_ablation", "nanomemory_depth", "nanomemory_depth_locomo"]
NEED_TWO += ["perturbation"]
PLACED = NEED_TWO + ["reward_rollouts", "coverage_locomo", "coverage_longmemeval", "build_sft", "build_rl"]


@pytest.mark.parametrize(
    "size, n, layout",
    [
        # (GPU size, count): Qwen3-32B's GPUs, tensor parallel, replicas; the 4B's GPU; the embedder's
        (H200, 1, ("0", 1, 1, "0", "cuda:0")),
        (H100, 2, ("0", 1, 1, "1", "cuda:1")),
        (L40S, 4, ("0,1", 2, 1, "2", "cuda:2")),
        # the 32B at tensor parallel 4; the embedder's 16 x 8,192-token batch (27 GiB with its weights) leaves
        # the 4B too little of a 40 GB GPU: it takes the next one
        (A100_40, 8, ("0,1,2,3", 4, 1, "5", "cuda:4")),
    ],
)
def test_main_table_gets_a_plan_on_the_gpus_people_have(models, size, n, layout):
    cfg, roles = job("main_table", f"placement=gpu{n}")
    assert place(cfg, gpus(n, size), roles) == []
    big, small = large(cfg), role_config(cfg.llm, "memory_small")["vllm"]
    placed = (big["gpus"], big["tensor_parallel_size"], big["data_parallel_size"], small["gpus"])
    assert (*placed, cfg.retrieval.retrievers.dense.encoder.device) == layout
    assert list(cfg.retrieval.reranker.devices) == [layout[-1]]
    # preflight shows, per server, its memory and the KV cache left: room for one full sequence at least
    lines = describe(cfg, gpus(n, size), roles)
    servers = [line for line in lines if line.startswith("vLLM server")]
    assert len(servers) == 2 and len(lines) == 4
    for line in servers:
        held = float(line.split(" KV cache = ")[1].split(" sequences")[0])
        assert held >= 1.0, line


def test_shares_follow_the_memory_each_gpu_reports(models):
    """The same plan on 80 and 141 GB GPUs: the 4B server's share is what the embedder and the reranker
    leave of its GPU, so a larger GPU gives it a smaller share of more memory."""
    shares = {}
    for size in (H100, H200):
        cfg, roles = job("main_table")
        assert place(cfg, gpus(2, size), roles) == []
        small = role_config(cfg.llm, "memory_small")["vllm"]
        shares[size] = (large(cfg)["gpu_memory_utilization"], small["gpu_memory_utilization"])
    assert shares == {H100: (0.95, 0.57), H200: (0.95, 0.73)}


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("experiment", PLACED)
def test_the_shipped_plans_fit_every_paper_experiment_on_80gb_gpus(models, experiment, n):
    cfg, roles = job(experiment, f"placement=gpu{n}")
    assert place(cfg, gpus(n, H100), roles) == []


@pytest.mark.parametrize("experiment", PLACED)
def test_one_80gb_gpu_holds_the_jobs_without_the_32b_and_141gb_every_one(models, experiment):
    small = ["constructor=qwen3_4b"] if "nanomemory" in experiment else []  # even its 4B constructor
    cfg, roles = job(experiment, "placement=gpu1", *small)
    assert bool(place(cfg, gpus(1, H100), roles)) == (experiment in NEED_TWO)
    cfg, roles = job(experiment, "placement=gpu1", *small)
    assert place(cfg, gpus(1, H200), roles) == []


@pytest.mark.parametrize(
    "experiment, role",
    [
        ("main_table", "memory_small"),
        ("radius_ablation", "memory"),  # llm=paper_4b: the memory role is the 4B model
        ("stage_ablation", "memory"),
        ("nanomemory_depth", "constructor_4b"),
    ],
)
def test_every_4b_model_goes_where_the_plan_puts_the_4b(models, experiment, role):
    cfg, roles = job(experiment, "placement=gpu8")
    assert place(cfg, gpus(8, H100), roles) == []
    small = role_config(cfg.llm, role)["vllm"]
    assert (small["gpus"], small["tensor_parallel_size"], small["data_parallel_size"]) == ("7", 1, 1)
    big = large(cfg)  # Qwen3-32B: seven replicas on the GPUs the 4B model and retrieval leave
    assert (big["gpus"], big["tensor_parallel_size"], big["data_parallel_size"]) == ("0,1,2,3,4,5,6", 1, 7)
    assert cfg.retrieval.retrievers.dense.encoder.device == "cuda:7"
