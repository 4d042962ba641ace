"""What a model needs of each GPU it is on: a :class:`Tenant` and the memory it is charged.

vLLM 0.32 reserves ``gpu_memory_utilization`` x the GPU's total memory when it starts (and will not start
unless that much is free), and gives its KV cache what is left of that after the weights, the peak activation
of a profile forward pass, its non-torch memory and the CUDA graphs it will capture
(vllm/v1/worker/gpu_worker.py:632-760); it refuses to start when that cannot hold one ``max_model_len``
sequence (vllm/v1/core/kv_cache_utils.py:1104-1137). So a server counts for its whole share, and needs its
weights, :func:`vllm_overhead` and one full sequence's KV cache in it, plus :data:`MARGIN_GIB`; the encoder
and the reranker count for their weights, the peak activations of one full batch of their longest inputs
(:func:`lazymem.gpu.model_memory.activation_gib`: Qwen3-Embedding-8B's 16 x 8,192 tokens take 12 GiB) and
:data:`TORCH_CONTEXT_GIB`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lazymem.gpu.inventory import Gpu

# activations and CUDA graphs of a vLLM server per GiB of weights on the GPU: issue 32's audit cites a
# published vLLM log of a dense 27B (50 GiB in bfloat16) with 3.2 GiB for the two; 3.9 for Qwen3-32B's 61
ACTIVATION_SHARE = 0.064
# the least a server's activations and CUDA graphs take, however small its model
MIN_ACTIVATION_GIB = 1.0
# vLLM's non-torch memory per GPU (cuBLAS workspaces), and with tensor parallelism (NCCL's buffers too)
NON_TORCH_GIB, NON_TORCH_TP_GIB = 0.5, 1.0
# GiB per GPU that every server's share keeps beyond its estimated need: what the estimates may be off by
MARGIN_GIB = 1.0
# the KV cache a server must hold when its model's config does not say
MIN_KV_GIB = 1.0
# the dense encoder's and the reranker's CUDA context, cuBLAS workspace and allocator slack, beside the
# activations of one batch (model_memory.activation_gib)
TORCH_CONTEXT_GIB = 1.0
# the same with the activations, for a model whose config does not tell them
TORCH_OVERHEAD_GIB = 2.0
# the largest share of a GPU a plan hands out: the rest is the CUDA contexts' (outside vLLM's share)
MAX_UTIL = 0.95


def vllm_overhead(weights_per_gpu: float, tp: int = 1) -> float:
    """GiB per GPU a vLLM server takes beside its weights and KV cache: activations and CUDA graphs by model
    size, and non-torch memory."""
    activations = max(MIN_ACTIVATION_GIB, ACTIVATION_SHARE * weights_per_gpu)
    return activations + (NON_TORCH_TP_GIB if tp > 1 else NON_TORCH_GIB)


@dataclass
class Tenant:
    """One model on the GPUs: where it is, what it takes there and what it needs."""

    what: str  # for messages, e.g. "vLLM server qwen3-32b (Qwen3-32B; roles answer, memory)"
    key: str  # the config key that places it
    devices: list[int]  # GPU indices as in the inventory
    weights: float | None  # GiB of weights in all; None: unknown
    server: bool = False  # a vLLM server (else a torch model: the encoder, the reranker)
    tp: int = 1  # a server's GPUs per replica
    dp: int = 1  # its replicas
    kv: float = 0.0  # GiB of KV cache of one max_model_len sequence, over a replica's GPUs
    tokens: int | None = None  # its max_model_len
    seqs: int | None = None  # its max_num_seqs
    util: float | None = None  # vLLM's share of each GPU; None: takes `need`
    util_key: str = ""
    keys: dict[str, list[str]] = field(default_factory=dict)  # option -> every config key holding it
    model: str = ""  # its model directory
    roles: list[str] = field(default_factory=list)  # a server's roles
    act: float | None = None  # a torch model's GiB of activations for one batch; None: unknown

    @property
    def count(self) -> int:
        """GPUs it takes."""
        return self.tp * self.dp if self.server else max(1, len(self.devices))

    def per_gpu(self, tp: int | None = None) -> float:
        return (self.weights or 0.0) / (tp or self.tp)

    def overhead(self, tp: int | None = None) -> float:
        tp = tp or self.tp
        if self.server:
            return vllm_overhead(self.per_gpu(tp), tp)
        return TORCH_OVERHEAD_GIB if self.act is None else TORCH_CONTEXT_GIB + self.act

    def need(self, tp: int | None = None) -> float:
        """Least GiB per GPU: weights, overhead, one full sequence's KV cache and the margin."""
        tp = tp or self.tp
        return self.per_gpu(tp) + self.overhead(tp) + (self.kv / tp + MARGIN_GIB if self.server else 0.0)

    def takes(self, gpu: Gpu) -> float:
        return self.util * gpu.total_gib if self.util is not None else self.need()

    def kv_budget(self, gpu: Gpu) -> float:
        """GiB per GPU left to a server's KV cache in its share."""
        return self.takes(gpu) - self.per_gpu() - self.overhead()
