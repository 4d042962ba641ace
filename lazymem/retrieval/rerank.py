"""Rerankers: score (query, message) pairs with a cross-encoder, or keep the fused order.

No cross-encoder ships offline on PyPI, so the CPU default is `NoReranker`. The two real ones load a
local model directory (or a hub id already in the HF cache) on first use: FlagEmbedding's
`FlagReranker` (the paper's BGE-Reranker-v2-M3; FlagEmbedding is the optional `rerank` extra) and
sentence-transformers' `CrossEncoder`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lazymem.data.schema import Message
from lazymem.retrieval.base import Reranker, check_template, render
from lazymem.retrieval.weights import LazyModel, local_model_problems, resolve_device, resolve_model


class NoReranker(Reranker):
    """Keeps the fused order: `score` returns None."""

    name = "none"

    def score(self, query: str, messages: Sequence[Message]) -> list[float] | None:
        return None


class FlagReranker(Reranker, LazyModel):
    """BGE cross-encoder through FlagEmbedding. Higher score = more relevant."""

    name = "flag"

    def __init__(
        self,
        model: str,
        use_fp16: bool = True,
        batch_size: int = 32,
        max_length: int = 1024,
        normalize: bool = False,
        devices: str | list[str] | None = None,
        template: str = "{text}",
        offline: bool = True,
    ):
        self.model_spec = model
        self.path, _ = resolve_model(model)
        self.use_fp16, self.batch_size, self.max_length = use_fp16, batch_size, max_length
        # a list from a config arrives as OmegaConf's ListConfig, which FlagEmbedding refuses: a plain list
        if devices is not None and not isinstance(devices, str | int):
            devices = list(devices)
        self.normalize, self.devices, self.offline = normalize, devices, offline
        self.template = check_template(template)

    def problems(self, where: str) -> list[str]:
        return local_model_problems(self.model_spec, f"{where}.model")

    def gpu_keys(self, where: str) -> list[str]:
        """Unless every device is the CPU: null means every GPU (FlagEmbedding's default)."""
        devices = [self.devices] if isinstance(self.devices, str | int) else self.devices
        cpu_only = devices is not None and all(str(d) == "cpu" for d in devices)
        return [] if cpu_only or str(self.model_spec).startswith("bundled:") else [f"{where}.devices"]

    def _load(self):
        try:
            from FlagEmbedding import FlagReranker as _Flag
        except ImportError as err:
            raise ImportError(
                "reranker FlagReranker needs FlagEmbedding: install the optional extra "
                "`pip install -e .[rerank]`, or use retrieval.reranker=none"
            ) from err
        return _Flag(
            self.path,
            use_fp16=self.use_fp16,
            devices=self.devices,
            batch_size=self.batch_size,
            max_length=self.max_length,
        )

    def score(self, query: str, messages: Sequence[Message]) -> list[float] | None:
        if not messages:
            return []
        pairs = [(query, render(m, self.template)) for m in messages]
        scores = self.model.compute_score(
            pairs, batch_size=self.batch_size, max_length=self.max_length, normalize=self.normalize
        )
        return [float(s) for s in np.atleast_1d(np.asarray(scores, dtype=np.float64))]  # one pair -> scalar


class CrossEncoderReranker(Reranker, LazyModel):
    """Any sentence-transformers `CrossEncoder` checkpoint. Higher score = more relevant."""

    name = "cross_encoder"

    def __init__(
        self,
        model: str,
        device: str = "auto",
        batch_size: int = 32,
        max_length: int | None = 512,
        template: str = "{text}",
        offline: bool = True,
        trust_remote_code: bool = False,
    ):
        self.model_spec = model
        self.path, _ = resolve_model(model)
        self.device, self.batch_size, self.max_length = device, batch_size, max_length
        self.offline, self.trust_remote_code = offline, trust_remote_code
        self.template = check_template(template)

    def problems(self, where: str) -> list[str]:
        return local_model_problems(self.model_spec, f"{where}.model")

    def gpu_keys(self, where: str) -> list[str]:
        """Only when told cuda: a small cross-encoder runs on the CPU where `auto` finds no GPU."""
        return [f"{where}.device"] if str(self.device).startswith("cuda") else []

    def _load(self):
        from sentence_transformers import CrossEncoder

        return CrossEncoder(
            self.path,
            device=resolve_device(self.device),
            max_length=self.max_length,
            local_files_only=self.offline,
            trust_remote_code=self.trust_remote_code,
        )

    def score(self, query: str, messages: Sequence[Message]) -> list[float] | None:
        if not messages:
            return []
        pairs = [(query, render(m, self.template)) for m in messages]
        scores = self.model.predict(pairs, batch_size=self.batch_size, show_progress_bar=False)
        return [float(s) for s in scores]
