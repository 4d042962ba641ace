"""GPU plans (conf/placement/, lazymem/gpu/plans.py) against fake GPU inventories: the plans preflight must
refuse, each with its fix, and a plan of your own checked naming each model (the derived layouts:
test_layout.py; the estimates they rest on: test_model_memory.py). No GPU, no model download: the model
directories hold only the real architectures' config.json."""

from __future__ import annotations

from lazymem.gpu.inventory import Gpu
from lazymem.gpu.plans import place, plan_problems
from lazymem.llm.llm_set import role_config

from helpers_gpu import A100_40, H100, job, large
from helpers_llm import gpus


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


def test_every_plan_bounds_the_sequences_in_flight(models):
    """64 windows of a question, or its one answer: vLLM sizes its sampler and CUDA graphs by max_num_seqs."""
    for n in (1, 2, 4, 8):
        cfg, _ = job("main_table", f"placement=gpu{n}")
        assert large(cfg)["max_num_seqs"] == 65
        assert role_config(cfg.llm, "memory_small")["vllm"]["max_num_seqs"] == 64


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
