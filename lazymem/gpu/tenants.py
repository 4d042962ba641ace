"""The job's models on GPUs, read from its config: its vLLM servers (roles with equal server specs share one),
its dense encoders and reranker, and the reward judge that training serves by hand; each a :class:`Tenant`
whose memory is estimated from its model directory (:mod:`lazymem.gpu.model_memory`)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from omegaconf import OmegaConf

from lazymem.gpu.budget import MAX_UTIL, MIN_KV_GIB, Tenant
from lazymem.gpu.inventory import Gpu
from lazymem.gpu.model_memory import activation_gib, kv_gib, model_gib
from lazymem.llm.backends import Backend, get_backend
from lazymem.llm.cache import canonical_json
from lazymem.llm.llm_set import role_config, to_dict

log = logging.getLogger(__name__)

# the batch and input length of the encoder and the reranker when their config does not say: the defaults
# of lazymem/retrieval/dense.py (64, the model's own length) and rerank.py's FlagReranker (32, 1,024)
ENCODER_BATCH, RERANKER_BATCH, RERANKER_TOKENS = 64, 32, 1024
# the server options a plan sets, each under one or more config keys
SERVER_KEYS = ("gpus", "tensor_parallel_size", "data_parallel_size", "gpu_memory_utilization")


def tenants(cfg, inventory: list[Gpu], roles: list[str], found: list[str], every: bool) -> list[Tenant]:
    """The job's models on GPUs: its vLLM servers (`every`: those set to the CPU too), encoders, reranker;
    what is wrong with their keys goes to `found`."""
    return _servers(cfg, roles, inventory, found, every) + _retrieval(cfg, inventory, found)


def _weights(what: str, model: str, dtype) -> float | None:
    gib = model_gib(model, dtype)
    if gib is None:
        log.warning("placement: cannot estimate the memory of %s from %r: weights not counted", what, model)
    return gib


def _vllm_key(llm: dict, role: str, name: str) -> str:
    own = ((llm.get("roles") or {}).get(role) or {}).get("vllm") or {}
    return f"llm.roles.{role}.vllm.{name}" if name in own else f"llm.common.vllm.{name}"


def _servers(cfg, roles: list[str], visible: list[Gpu], found: list[str], every: bool) -> list[Tenant]:
    """The job's distinct vLLM servers on GPUs (roles with equal server specs share one); `every`: those
    set to the CPU too (the first-GPU-run check plans them as a GPU node would)."""
    llm = to_dict(cfg.llm)
    groups: dict[str, tuple[list[str], Backend]] = {}
    for role in roles:
        try:
            backend = get_backend(role_config(llm, role)).resolve()
        except (KeyError, ValueError):
            continue  # preflight names what is wrong with the role itself
        if backend.name == "vllm" and (backend.needs_gpu or every):
            groups.setdefault(canonical_json(backend.server_spec()), ([], backend))[0].append(role)
    models = []
    for served, backend in groups.values():
        o, role = backend.options, served[0]
        tp, dp = int(o.get("tensor_parallel_size") or 1), int(o.get("data_parallel_size") or 1)
        what = f"vLLM server {backend.served_name} ({Path(backend.model).name}; roles {', '.join(served)})"
        gpus_key = _vllm_key(llm, role, "gpus")
        if o.get("gpus") is None:  # CUDA_VISIBLE_DEVICES inherited: vLLM takes the first GPUs
            devices = [g.index for g in visible[: tp * dp]]
        else:
            devices = [int(d) for d in str(o["gpus"]).split(",") if d.strip().isdigit()]
        if len(devices) != tp * dp:
            found.append(
                f"{what} needs tensor_parallel_size {tp} x data_parallel_size {dp} = {tp * dp} GPUs but "
                f"{gpus_key} = {o.get('gpus')!r} gives it {len(devices)}: make them agree"
            )
        kv = kv_gib(backend.model, o.get("max_model_len"), o.get("dtype"))
        tokens = o.get("max_model_len")
        keys = {name: sorted({_vllm_key(llm, r, name) for r in served}) for name in SERVER_KEYS}
        models.append(
            Tenant(
                what,
                gpus_key,
                devices,
                _weights(what, backend.model, o.get("dtype")),
                server=True,
                tp=tp,
                dp=dp,
                kv=MIN_KV_GIB if kv is None else kv,
                tokens=int(tokens) if tokens else None,
                seqs=o.get("max_num_seqs"),
                util=float(o.get("gpu_memory_utilization") or 0.9),  # unset: vLLM's default
                util_key=_vllm_key(llm, role, "gpu_memory_utilization"),
                keys=keys,
                model=backend.model,
                roles=served,
            )
        )
    return models


def _torch_devices(spec, visible: list[Gpu]) -> tuple[list[int], list[str]]:
    """(GPU indices, names not visible) of a torch device spec: cuda:K is the K-th visible GPU, auto/cuda
    the first, null (FlagEmbedding's default) every one; cpu is none."""
    if spec is None:
        return [g.index for g in visible], []
    devices, missing = [], []
    for name in map(str, spec if isinstance(spec, list) else [spec]):
        if name in ("auto", "cuda"):
            name = "cuda:0"
        if not name.removeprefix("cuda:").isdigit():
            continue  # cpu, mps
        k = int(name.removeprefix("cuda:"))
        if k < len(visible):
            devices.append(visible[k].index)
        else:
            missing.append(name)
    return devices, missing


def _retrieval(cfg, visible: list[Gpu], found: list[str]) -> list[Tenant]:
    """The dense encoders and the reranker on GPUs (bundled CPU models are not placed)."""
    retrieval = OmegaConf.to_container(cfg.retrieval, resolve=True) if "retrieval" in cfg else {}
    parts = []
    for name, retriever in (retrieval.get("retrievers") or {}).items():
        enc = (retriever or {}).get("encoder") or {}
        kwargs = enc.get("model_kwargs") or {}
        dtype = kwargs.get("dtype") or kwargs.get("torch_dtype")  # sentence-transformers loads float32 else
        key = f"retrieval.retrievers.{name}.encoder.device"
        batch = (
            enc.get("batch_size") or ENCODER_BATCH,
            enc.get("max_seq_length") or _st_length(enc.get("model")),
        )
        parts.append((f"the {name} encoder", key, enc.get("model"), enc.get("device", "auto"), dtype, batch))
    rr = retrieval.get("reranker") or {}
    if "devices" in rr:  # FlagReranker (BGE)
        dtype = "float16" if rr.get("use_fp16", True) else "float32"
        key = "retrieval.reranker.devices"
        batch = (rr.get("batch_size") or RERANKER_BATCH, rr.get("max_length") or RERANKER_TOKENS)
        parts.append(("the reranker", key, rr.get("model"), rr.get("devices"), dtype, batch))
    models = []
    for label, key, model, spec, dtype, (size, tokens) in parts:
        if not model or str(model).startswith("bundled:"):
            continue
        what = f"{label} ({Path(str(model)).name})"
        devices, missing = _torch_devices(spec, visible)
        if missing:
            found.append(f"{key} = {spec!r}: {', '.join(missing)} is not visible ({len(visible)} GPUs)")
        if devices or missing:
            act = activation_gib(str(model), int(size), tokens, dtype)
            weights = _weights(what, str(model), dtype)
            models.append(Tenant(what, key, devices, weights, model=str(model), act=act))
    return models


def _st_length(model) -> int | None:
    """sentence-transformers' own input limit of a model directory (sentence_bert_config.json), which it
    truncates to when max_seq_length is null; None: the model's context length bounds it."""
    path = Path(str(model)).expanduser() / "sentence_bert_config.json"
    try:
        return json.loads(path.read_text())["max_seq_length"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def judge_tenant(cfg) -> Tenant:
    """The quality-reward judge's vLLM server (``llm.roles.reward_judge``: an endpoint to the reward
    workers, served by hand as :func:`lazymem.tasks.train_grpo.judge_command` prints) as a tenant: Qwen3-32B
    (``llm.common.model``) with one ``context_tokens`` sequence of KV cache."""
    rc = role_config(cfg.llm, "reward_judge")
    vllm = rc.get("vllm") or {}
    what = f"the reward judge ({Path(str(rc.get('model'))).name} at {rc.get('base_url')})"
    kv = kv_gib(str(rc.get("model")), rc.get("context_tokens"), vllm.get("dtype"))
    return Tenant(
        what,
        "placement.train.reward_judge",
        [],
        _weights(what, str(rc.get("model")), vllm.get("dtype")),
        server=True,
        kv=MIN_KV_GIB if kv is None else kv,
        tokens=rc.get("context_tokens"),
        util=MAX_UTIL,
    )
