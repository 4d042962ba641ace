"""GPU plans (conf/placement/) against fake GPU inventories: the shipped plans that must fit, and the plans
preflight must refuse with their fix (the memory estimates they rest on: test_model_memory.py). No GPU, no
model download: the model directories hold only the real architectures' config.json."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hydra import compose, initialize_config_dir

from lazymem import placement
from lazymem.conf import CONF_DIR
from lazymem.llm.llm_set import role_config
from lazymem.placement import Gpu, plan_problems
from lazymem.preflight import roles_used
from lazymem.tasks.evaluate import build_methods

from helpers_llm import MODEL_CONFIGS, gpus, paper_model_dirs

# the roles of the tasks that take no methods (evaluate and main_table: their methods' roles)
TASK_ROLES = {"perturbation": ["answer", "judge"], "reward_rollouts": ["memory"], "coverage": []}
TASK_ROLES |= {"build_sft": ["teacher"], "build_rl": []}
# the experiments whose tasks place models on GPUs; those that serve Qwen3-32B beside the embedder need 2
NEED_TWO = ["main_table", "radius_ablation", "stage_ablation", "nanomemory_depth", "nanomemory_depth_locomo"]
NEED_TWO += ["perturbation"]
PLACED = NEED_TWO + ["reward_rollouts", "coverage_locomo", "coverage_longmemeval", "build_sft", "build_rl"]
ONE_GPU = "at least 2 GPUs of 80 GiB; 1 visible: run it on a node with 2 GPUs and pass placement=gpu2"


@pytest.fixture
def models(tmp_path, monkeypatch):
    return paper_model_dirs(tmp_path, monkeypatch)


def job(experiment: str, *overrides: str):
    """(config, roles) of an experiment as its task would check it."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[f"+experiment={experiment}", *overrides])
    if cfg.task in ("evaluate", "main_table"):
        return cfg, roles_used(build_methods(cfg))
    return cfg, TASK_ROLES[cfg.task]


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("experiment", PLACED)
def test_the_shipped_plans_fit_every_paper_experiment(models, experiment, n):
    cfg, roles = job(experiment, f"placement=gpu{n}")
    assert plan_problems(cfg, gpus(n), roles) == []
    assert plan_problems(cfg, gpus(n, 79.6), roles) == []  # an H100 80GB shows 79.6 GiB


def test_paper_experiments_default_to_the_papers_two_gpus_and_cpu_ones_to_none():
    """The GPU plans set the paper retrieval's device keys: any other retrieval must compose no plan."""
    for path in sorted((CONF_DIR / "experiment").glob("*.yaml")):
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose("config", overrides=[f"+experiment={path.stem}"], return_hydra_config=True)
        choices = cfg.hydra.runtime.choices
        if path.stem in PLACED:
            assert choices["placement"] == "gpu2", path.stem
        elif choices["retrieval"] != "paper_gpu":
            assert choices["placement"] == "none" and cfg.placement.gpus == 0, path.stem


@pytest.mark.parametrize(
    "experiment, role",
    [
        ("main_table", "memory_small"),
        ("radius_ablation", "memory"),  # llm=paper_4b: the memory role is the 4B model
        ("stage_ablation", "memory"),
        ("reward_rollouts", "memory"),
        ("nanomemory_depth", "constructor_4b"),
    ],
)
def test_every_4b_model_goes_where_the_plan_puts_the_4b(models, experiment, role):
    cfg, _ = job(experiment, "placement=gpu8")
    small = role_config(cfg.llm, role)["vllm"]
    assert (small["gpus"], small["tensor_parallel_size"], small["gpu_memory_utilization"]) == ("6", 1, 0.9)
    large = role_config(cfg.llm, "answer")["vllm"]  # Qwen3-32B, memory role's server too where it is 32B
    assert (large["gpus"], large["tensor_parallel_size"], large["data_parallel_size"]) == (
        "0,1,2,3,4,5",
        2,
        3,
    )
    assert cfg.retrieval.retrievers.dense.encoder.device == "cuda:7"
    assert list(cfg.retrieval.reranker.devices) == ["cuda:7"]


@pytest.mark.parametrize("experiment", PLACED)
def test_one_gpu_holds_the_jobs_without_the_32b_and_refuses_the_others(models, experiment):
    small = ["constructor=qwen3_4b"] if "nanomemory" in experiment else []  # even its 4B constructor
    cfg, roles = job(experiment, "placement=gpu1", *small)
    found = plan_problems(cfg, gpus(1), roles)
    if experiment not in NEED_TWO:
        assert found == []
        return
    assert ONE_GPU in found[0]
    assert any("GPU 0 is over-subscribed" in f and "Qwen3-32B" in f for f in found)


def test_main_table_on_one_gpu_names_every_model(models):
    cfg, roles = job("main_table", "placement=gpu1")
    (head, *rest) = plan_problems(cfg, gpus(1), roles)
    for model in MODEL_CONFIGS:
        assert model in head
    assert "at least 102 GiB" in head


def test_a_plan_for_more_gpus_than_visible_names_the_plan_that_fits(models):
    cfg, roles = job("coverage_locomo")  # gpu2 by default; the embedder alone fits one GPU
    expected = "placement=gpu2 needs 2 GPUs, 1 visible: pass placement=gpu1"
    assert plan_problems(cfg, gpus(1), roles) == [expected]
    cfg, roles = job("main_table", "placement=gpu4")
    expected = "placement=gpu4 needs 4 GPUs, 3 visible: pass placement=gpu2"
    assert plan_problems(cfg, gpus(3), roles) == [expected]
    cfg, roles = job("main_table")
    (found,) = plan_problems(cfg, gpus(1), roles)
    assert found.startswith("placement=gpu2 needs 2 GPUs, 1 visible; this job's models need at least")
    assert found.endswith("run it on a node with 2 GPUs and pass placement=gpu2")


def test_the_32b_at_062_of_an_80gb_gpu_is_refused_with_the_share_it_needs(models):
    cfg, roles = job("main_table", "llm.common.vllm.gpu_memory_utilization=0.62")
    found = plan_problems(cfg, gpus(2), roles)
    (share,) = [f for f in found if "qwen3-32b" in f]
    assert "vLLM server qwen3-32b (Qwen3-32B; roles answer, memory) needs about 71.0 GiB per GPU" in share
    assert "gives it 49.6 of GPU 0's 80.0 GiB: pass llm.common.vllm.gpu_memory_utilization=0.89" in share


def test_two_servers_over_one_gpu_are_refused_naming_each(models):
    small = "llm.roles.memory_small.vllm"
    shares = ("llm.common.vllm.gpu_memory_utilization=0.6", f"{small}.gpu_memory_utilization=0.6")
    cfg, roles = job("main_table", f'{small}.gpus="0"', *shares)
    found = plan_problems(cfg, gpus(2), roles)
    (over,) = [f for f in found if f.startswith("GPU 0 is over-subscribed")]
    assert "96.0 GiB planned of 80.0" in over
    assert "vLLM server qwen3-32b (Qwen3-32B; roles answer, memory): 48.0 [llm.common.vllm.gpus]" in over
    assert f"vLLM server lazymem-4b (Qwen3-4B; roles memory_small): 48.0 [{small}.gpus]" in over


def test_a_gpu_over_subscribed_by_retrieval_suggests_a_share_that_fits(models):
    cfg, roles = job("main_table", "llm.roles.memory_small.vllm.gpu_memory_utilization=0.9")
    (over,) = plan_problems(cfg, gpus(2), roles)
    assert over.startswith("GPU 1 is over-subscribed: 91.1 GiB planned of 80.0")
    assert "the dense encoder (Qwen3-Embedding-8B): 16.1 [retrieval.retrievers.dense.encoder.device]" in over
    assert "pass llm.roles.memory_small.vllm.gpu_memory_utilization=0.76" in over


def test_40gb_gpus_refuse_the_80gb_plans(models):
    for n in (2, 4, 8):
        cfg, roles = job("main_table", f"placement=gpu{n}")
        found = plan_problems(cfg, gpus(n, 40.0), roles)
        assert found and found[-1].startswith(f"placement=gpu{n} is sized for GPUs of 80 GiB, these have 40")


def test_memory_held_by_other_processes_is_named(models):
    cfg, roles = job("main_table")
    (found,) = plan_problems(cfg, [Gpu(0, 80.0, 50.0), Gpu(1, 80.0, 80.0)], roles)
    assert found.startswith("GPU 0 has 50.0 of 80.0 GiB free but the plan needs 72.0")


def test_a_plan_naming_a_gpu_that_is_not_there_is_refused(models):
    cfg, roles = job("main_table", "placement=gpu2", 'llm.roles.memory_small.vllm.gpus="5"')
    found = plan_problems(cfg, gpus(2), roles)
    server = "vLLM server lazymem-4b (Qwen3-4B; roles memory_small)"
    assert found == [f"llm.roles.memory_small.vllm.gpus places {server} on GPU 5, not visible (GPUs [0, 1])"]
    cfg, roles = job("main_table", "placement=gpu4", "llm.common.vllm.tensor_parallel_size=4")
    found = plan_problems(cfg, gpus(4), roles)
    assert any("= 4 GPUs but llm.common.vllm.gpus = '0,1' gives it 2: make them agree" in f for f in found)


def test_no_plan_on_a_gpu_node_is_checked_and_names_a_plan(models):
    cfg, roles = job("main_table", "placement=none")
    found = plan_problems(cfg, gpus(8), roles)
    assert found[0].startswith("GPU 0 is over-subscribed") and found[-1].endswith("pass placement=gpu8")


def test_inventory_reads_nvidia_smi_in_cuda_visible_order(monkeypatch):
    out = "0, 81920, 81000\n1, 81920, 1000\n2, 40960, 40960\n"
    monkeypatch.setattr(placement.shutil, "which", lambda _: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(
        placement.subprocess, "run", lambda *a, **k: SimpleNamespace(returncode=0, stdout=out)
    )
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    expected = [Gpu(0, 80.0, 81000 / 1024), Gpu(1, 80.0, 1000 / 1024), Gpu(2, 40.0, 40.0)]
    assert placement.gpu_inventory() == expected
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    assert [g.index for g in placement.gpu_inventory()] == [2, 0]
    monkeypatch.setattr(placement.shutil, "which", lambda _: None)
    assert placement.gpu_inventory() == []
