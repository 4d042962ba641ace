"""The job's models read from its config (lazymem/gpu/tenants.py), each charged what it needs: the dense
encoder its batch's activations. No GPU, no model download: the model directories hold only the real
architectures' config.json."""

from __future__ import annotations

from lazymem.gpu.plans import describe, place

from helpers_gpu import job
from helpers_llm import gpus


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
