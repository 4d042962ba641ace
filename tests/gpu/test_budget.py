"""What a model is charged on its GPUs (lazymem/gpu/budget.py): a vLLM server's activations and CUDA graphs
beside its weights. The plans that rest on these charges: test_plans.py and test_layout.py."""

from __future__ import annotations

from lazymem.gpu import budget
from lazymem.gpu.budget import vllm_overhead


def test_a_dense_32b_is_charged_its_activations_and_cuda_graphs():
    """vLLM 0.32 reserves a profile run's peak activation and its CUDA graphs beside the weights: a published
    log of a dense 27B shows 3.2 GiB for the two. A flat 2 GiB per GPU (today's charge) left Qwen3-32B
    0.6 GiB of slack at 0.9 of an 80 GB GPU."""
    assert vllm_overhead(61.0) - budget.NON_TORCH_GIB >= 3.2
    assert vllm_overhead(61.0) > vllm_overhead(7.5) >= budget.MIN_ACTIVATION_GIB
