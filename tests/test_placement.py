"""GPU plans (conf/placement/) against fake GPU inventories: the plans derived from the GPUs a job finds, the
plans preflight must refuse with their fix, and the estimate they rest on (the weights' estimates:
test_model_memory.py). No GPU, no model download: the model directories hold only the real architectures'
config.json. Every test here checks the configuration a GPU run would start its servers with."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hydra import compose, initialize_config_dir

from lazymem import placement
from lazymem.conf import CONF_DIR
from lazymem.llm.llm_set import role_config
from lazymem.model_memory import kv_gib
from lazymem.placement import Gpu, describe, place, plan_problems, sold_as, training, vllm_overhead
from lazymem.preflight import roles_used
from lazymem.tasks.evaluate import build_methods

from helpers_llm import MODEL_CONFIGS, gpus, paper_model_dirs

# the roles of the tasks that take no methods (evaluate and main_table: their methods' roles)
TASK_ROLES = {"perturbation": ["answer", "judge"], "reward_rollouts": ["memory"], "coverage": []}
TASK_ROLES |= {"build_sft": ["teacher"], "build_rl": []}
# the experiments whose tasks place models on GPUs; those that serve Qwen3-32B beside the embedder need two
# 80 GB GPUs (or one of 141 GB)
NEED_TWO = ["main_table", "radius_ablation", "stage_ablation", "nanomemory_depth", "nanomemory_depth_locomo"]
NEED_TWO += ["perturbation"]
PLACED = NEED_TWO + ["reward_rollouts", "coverage_locomo", "coverage_longmemeval", "build_sft", "build_rl"]
# the GPUs people have, as nvidia-smi reports them: an H200 141 GB, H100 80GB, L40S 48 GB, A100 40GB
H200, H100, L40S, A100_40 = 140.4, 79.6, 45.0, 40.0


@pytest.fixture
def models(tmp_path, monkeypatch):
    return paper_model_dirs(tmp_path, monkeypatch)


def job(experiment: str, *overrides: str):
    """(config, roles) of an experiment as its task would check it."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[f"+experiment={experiment}", *overrides])
    if cfg.task in ("evaluate", "main_table"):
        return cfg, roles_used(build_methods(cfg))
    return cfg, TASK_ROLES.get(cfg.task, [])


def large(cfg) -> dict:
    """Qwen3-32B's server options (the answer role's)."""
    return role_config(cfg.llm, "answer")["vllm"]


def test_a_dense_32b_is_charged_its_activations_and_cuda_graphs():
    """vLLM 0.32 reserves a profile run's peak activation and its CUDA graphs beside the weights: a published
    log of a dense 27B shows 3.2 GiB for the two. A flat 2 GiB per GPU (today's charge) left Qwen3-32B
    0.6 GiB of slack at 0.9 of an 80 GB GPU."""
    assert vllm_overhead(61.0) - placement.NON_TORCH_GIB >= 3.2
    assert vllm_overhead(61.0) > vllm_overhead(7.5) >= placement.MIN_ACTIVATION_GIB


def test_the_papers_share_of_an_80gb_gpu_leaves_the_32b_no_room_for_one_full_sequence(models):
    cfg, roles = job("main_table", "placement.derive=false", "llm.common.vllm.gpu_memory_utilization=0.9")
    (share,) = plan_problems(cfg, gpus(2, H100), roles)
    assert "vLLM server qwen3-32b (Qwen3-32B; roles answer, memory) needs about 74.4 GiB per GPU" in share
    assert "8.0 of KV cache for one 32768-token sequence" in share
    assert "gpu_memory_utilization 0.9 gives it 71.6 of GPU 0's 79.6 GiB" in share
    assert share.endswith(
        "pass llm.common.vllm.gpu_memory_utilization=0.94, or split it over more GPUs "
        "(tensor_parallel_size, and as many in gpus) or use a plan with more GPUs"
    )


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


def test_two_40gb_gpus_are_refused_with_their_fix(models):
    cfg, roles = job("main_table")  # placement=gpu2
    (found,) = place(cfg, gpus(2, A100_40), roles)
    assert found == (
        "placement=gpu2 on 2 GPUs of 40 GB (40.0 GiB): vLLM server qwen3-32b (Qwen3-32B; roles answer, "
        "memory) needs 38.5 GiB per GPU at tensor parallel 2, more than 0.95 of a 40.0 GiB GPU; run it on a "
        "node with 5 of them and pass placement=gpu8, or on 2 GPUs of 80 GB (placement=gpu2)"
    )


def test_one_80gb_gpu_refuses_main_table_naming_the_gpus_that_hold_it(models):
    cfg, roles = job("main_table", "placement=gpu1")
    (found,) = place(cfg, gpus(1, H100), roles)
    assert "run it on a node with 2 of them and pass placement=gpu2, or on 1 GPU of 141 GB" in found


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


def test_a_48gb_card_reporting_45_gib_counts_as_48_gb():
    assert [sold_as(g) for g in (L40S, A100_40, H100, 80.0, 93.6, H200)] == [48, 40, 80, 80, 94, 141]


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


def test_every_plan_bounds_the_sequences_in_flight(models):
    """64 windows of a question, or its one answer: vLLM sizes its sampler and CUDA graphs by max_num_seqs."""
    for n in (1, 2, 4, 8):
        cfg, _ = job("main_table", f"placement=gpu{n}")
        assert large(cfg)["max_num_seqs"] == 65
        assert role_config(cfg.llm, "memory_small")["vllm"]["max_num_seqs"] == 64


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


def test_the_encoders_batch_is_charged_and_a_gpu_too_small_for_it_is_refused(models):
    """N24: Qwen3-Embedding-8B in-process (retrieval=paper_gpu) takes its 14.1 GiB of weights plus one
    batch of 16 x 8,192 tokens (12.0 GiB of activations, model_memory.activation_gib) and its CUDA context:
    27.1 GiB. A 24 GB GPU, which the flat 2 GiB margin passed (16.1 GiB), is refused, naming the keys that
    shrink the batch; a smaller batch fits."""
    cfg, roles = job("coverage_locomo", "placement=gpu1")
    (found,) = place(cfg, gpus(1, 23.6), roles)
    assert found.startswith(
        "placement=gpu1 on 1 GPU of 24 GB (23.6 GiB): the dense encoder (Qwen3-Embedding-8B) (27.1 GiB: 14.1 "
        "of weights, 12.0 of activations for one full batch; a smaller batch_size or max length under "
        "retrieval.retrievers.dense.encoder takes less) finds no GPU with room for it"
    )
    cfg, roles = job("coverage_locomo", "placement=gpu1")
    assert place(cfg, gpus(1, 44.0), roles) == []
    (encoder, _) = describe(cfg, gpus(1, 44.0), roles)
    assert encoder.endswith("27.1 GiB each: 14.1 weights + 13.0 a batch's activations, CUDA context")
    cfg, roles = job("coverage_locomo", "placement=gpu1", "retrieval.retrievers.dense.encoder.batch_size=2")
    assert place(cfg, gpus(1, 23.6), roles) == []


def test_a_plan_for_more_gpus_than_visible_names_the_plan_that_fits(models):
    cfg, roles = job("coverage_locomo")  # gpu2 by default; the embedder alone fits one GPU
    assert place(cfg, gpus(1), roles) == ["placement=gpu2 needs 2 GPUs, 1 visible: pass placement=gpu1"]
    cfg, roles = job("main_table")
    (found,) = place(cfg, gpus(1), roles)
    assert found.startswith("placement=gpu2 needs 2 GPUs, 1 visible; this job's models need at least")
    assert found.endswith("run it on a node with 2 GPUs and pass placement=gpu2")


def test_a_plan_of_your_own_is_checked_naming_each_model(models):
    small = "llm.roles.memory_small.vllm"
    shares = ("llm.common.vllm.gpu_memory_utilization=0.6", f"{small}.gpu_memory_utilization=0.6")
    cfg, roles = job("main_table", "placement.derive=false", f'{small}.gpus="0"', *shares)
    found = place(cfg, gpus(2), roles)
    (over,) = [f for f in found if f.startswith("GPU 0 is over-subscribed")]
    assert "96.0 GiB planned of 80.0" in over
    assert "vLLM server qwen3-32b (Qwen3-32B; roles answer, memory): 48.0 [llm.common.vllm.gpus]" in over
    assert f"vLLM server lazymem-4b (Qwen3-4B; roles memory_small): 48.0 [{small}.gpus]" in over


def test_memory_held_by_other_processes_is_named(models):
    cfg, roles = job("main_table")
    (found,) = place(cfg, [Gpu(0, 80.0, 50.0), Gpu(1, 80.0, 80.0)], roles)
    assert found.startswith("GPU 0 has 50.0 of 80.0 GiB free but the plan needs 76.0")


def test_a_plan_naming_a_gpu_that_is_not_there_is_refused(models):
    cfg, roles = job("main_table", "placement.derive=false", 'llm.roles.memory_small.vllm.gpus="5"')
    found = place(cfg, gpus(2), roles)
    server = "vLLM server lazymem-4b (Qwen3-4B; roles memory_small)"
    assert found == [f"llm.roles.memory_small.vllm.gpus places {server} on GPU 5, not visible (GPUs [0, 1])"]


def test_no_plan_on_a_gpu_node_is_checked_and_names_a_plan(models):
    cfg, roles = job("main_table", "placement=none")
    found = place(cfg, gpus(8), roles)
    assert any(f.startswith("GPU 0 is over-subscribed") for f in found)
    assert found[-1] == "placement=none places nothing: pass placement=gpu8"


def fake_smi(monkeypatch, out: str) -> None:
    monkeypatch.setattr(placement.shutil, "which", lambda _: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(
        placement.subprocess, "run", lambda *a, **k: SimpleNamespace(returncode=0, stdout=out)
    )


SMI = "0, GPU-a0, 81920, 81000\n1, GPU-a1, 81920, 1000\n2, GPU-a2, 40960, 40960\n3, GPU-a3, 40960, 20000\n"


def test_the_inventory_numbers_the_gpus_as_the_job_sees_them(monkeypatch):
    fake_smi(monkeypatch, SMI)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert [g.index for g in placement.gpu_inventory()] == [0, 1, 2, 3]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")  # SLURM's node-wide indices
    assert placement.gpu_inventory() == [Gpu(0, 40.0, 40.0), Gpu(1, 40.0, 20000 / 1024)]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-a1,0")  # UUIDs too, in their order
    assert placement.gpu_inventory() == [Gpu(0, 80.0, 1000 / 1024), Gpu(1, 80.0, 81000 / 1024)]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert placement.gpu_inventory() == []
    monkeypatch.setattr(placement.shutil, "which", lambda _: None)
    assert placement.gpu_inventory() == []


def test_a_slurm_job_on_the_nodes_gpus_2_and_3_gets_its_plan(models, monkeypatch):
    """Plans index the GPUs the job can see: the paper's plan fits a job given the node's GPUs 2 and 3."""
    fake_smi(monkeypatch, SMI.replace("40960", "81920"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    cfg, roles = job("main_table")
    inventory = placement.gpu_inventory()
    assert [g.index for g in inventory] == [0, 1]
    found = place(cfg, [g._replace(free_gib=g.total_gib) for g in inventory], roles)
    assert found == [] and large(cfg)["gpus"] == "0"


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
    judge = placement.judge_tenant(grpo())
    assert judge.tokens == 16384 and judge.need() <= 0.9 * H100
    own = kv_gib(models["Qwen3-32B"], MODEL_CONFIGS["Qwen3-32B"]["max_position_embeddings"])
    assert own == pytest.approx(10.0) and judge.need() - judge.kv + own > 0.9 * H100
    (found,) = training(grpo("llm.roles.reward_judge.context_tokens=40960"), gpus(3, H100))[1]
    assert "needs 76.4 GiB with a 40960-token context (llm.roles.reward_judge.context_tokens)" in found
