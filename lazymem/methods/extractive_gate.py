"""Extractive gate: LazyMem's windows, but a small trained scorer keeps messages verbatim instead of an LLM.

Every message of every window gets a few query-relevance features (bi-encoder cosine with the question,
the same for its neighbours, content-word overlap, whether and how high retrieval ranked it, length,
speaker) and a logistic model turns them into a keep probability; messages at or above the threshold
are kept word for word, in chronological order. No generation, so the block is always format-valid and a
window costs milliseconds. The weights and threshold come from `task=train_gate` (threshold chosen on
validation windows to maximise the paper's action reward); the bundled `gate_synthetic.json` was trained
on the framework's own synthetic data, so the default works offline.

Windows, merging and records are LazyMem's: each window's record has outcome `gate_ok` and its KEEP/DROP
decisions (content = the message text), so gold kept / non-gold dropped / format rates apply unchanged.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lazymem.construct.accuracy import ETA, action_reward, category_accuracy, copied_words
from lazymem.construct.decisions import Decision, kept_content, merge_decisions
from lazymem.construct.processor import WindowResult
from lazymem.construct.render import render_raw
from lazymem.construct.windows import Window, build_windows
from lazymem.data.schema import History, Message, Question
from lazymem.methods.base import Context, MemoryBlock
from lazymem.retrieval.bm25 import Tokenizer

BUNDLED = Path(__file__).with_name("gate_synthetic.json")
FEATURES = (
    "cos",  # cosine of message and question
    "cos_context",  # the better cosine of the two neighbours
    "cos_gap",  # cosine minus the window's best cosine
    "overlap",  # share of the question's content words in the message
    "overlap_context",  # the same for the neighbours
    "retrieved",  # 1 for a retrieved (core) message, 0 for a bridge
    "rank",  # 1 / (1 + retrieval rank) for retrieved messages, else 0
    "log_len",  # log of the message's word count
    "assistant",  # 1 for an assistant turn
)
_WORDS = Tokenizer(lowercase=True, stopwords="en_plus")


@dataclass
class GateModel:
    """Logistic regression over FEATURES (standardised with the training mean/std) and a threshold."""

    weights: np.ndarray
    bias: float
    mean: np.ndarray
    std: np.ndarray
    threshold: float = 0.5
    # the dense retriever the cosine features were computed with (encoder_identity); None = not recorded
    encoder: dict | None = None

    def prob(self, x: np.ndarray) -> np.ndarray:
        z = ((x - self.mean) / self.std) @ self.weights + self.bias
        return 1.0 / (1.0 + np.exp(-z))

    @classmethod
    def fit(cls, x: np.ndarray, y: np.ndarray, l2: float = 1.0, steps: int = 50) -> GateModel:
        """Newton's method on the L2-penalised log loss (a convex problem: deterministic, seconds)."""
        if x.ndim != 2 or x.shape[1] != len(FEATURES) or len(y) != len(x):
            raise ValueError(
                f"expected x of shape (m, {len(FEATURES)}) and m labels, got {x.shape}, {len(y)}"
            )
        if len(set(y.tolist())) < 2:
            raise ValueError("training a gate needs both kept (gold) and dropped (non-gold) messages")
        mean, std = x.mean(0), x.std(0)
        std[std == 0] = 1.0
        a = np.hstack([(x - mean) / std, np.ones((len(x), 1))])
        w = np.zeros(a.shape[1])
        penalty = np.full(a.shape[1], l2)
        penalty[-1] = 0.0  # the bias is not shrunk
        for _ in range(steps):
            p = 1.0 / (1.0 + np.exp(-(a @ w)))
            grad = a.T @ (p - y) + penalty * w
            hess = (a * (p * (1 - p))[:, None]).T @ a + np.diag(penalty)
            step = np.linalg.solve(hess, grad)
            w -= step
            if np.abs(step).max() < 1e-8:
                break
        return cls(weights=w[:-1], bias=float(w[-1]), mean=mean, std=std)

    def to_dict(self) -> dict:
        return {
            "features": list(FEATURES),
            "weights": self.weights.tolist(),
            "bias": self.bias,
            "mean": self.mean.tolist(),
            "std": self.std.tolist(),
            "threshold": self.threshold,
            "encoder": self.encoder,
        }

    @classmethod
    def load(cls, path: str | Path) -> GateModel:
        data = json.loads(Path(path).read_text())
        if data.get("features") != list(FEATURES):
            raise ValueError(
                f"{path}: gate trained on features {data.get('features')}, this code uses {FEATURES}"
            )
        arr = {k: np.asarray(data[k], dtype=np.float64) for k in ("weights", "mean", "std")}
        return cls(
            bias=float(data["bias"]), threshold=float(data["threshold"]), encoder=data.get("encoder"), **arr
        )

    def check_encoder(self, dense, where: str) -> None:
        """Refuse a dense retriever other than the one the gate was trained with: its cosine features
        (weights, mean and std) only mean something for that encoder and those templates."""
        if self.encoder is not None and self.encoder != encoder_identity(dense):
            raise ValueError(
                f"{where}: the gate was trained on features of the dense retriever {self.encoder}, "
                f"but this job's is {encoder_identity(dense)}; train a gate under this retrieval "
                "(task=train_gate, e.g. +experiment=train_gate_cpu) or use the retrieval it was trained with"
            )


def encoder_identity(dense) -> dict:
    """What of a DenseRetriever changes the gate's cosine features: the model, its input length and
    the templates messages and questions are embedded with."""
    return {
        "model": dense.encoder.model_spec,
        "max_seq_length": dense.encoder.max_seq_length,
        "template": dense.template,
        "query_template": dense.query_template,
    }


def window_features(
    window: Window,
    messages: Sequence[Message],
    vectors: dict[int, np.ndarray],
    query_vec: np.ndarray,
    query_words: set[str],
    rank: dict[int, int],
) -> np.ndarray:
    """One FEATURES row per message of the window. `vectors` holds the unit vectors of the window's
    messages and their neighbours; `rank` the retrieval rank of each retrieved message (0 = best)."""
    cos = {i: float(v @ query_vec) for i, v in vectors.items()}
    words = {i: set(_WORDS(messages[i].text)) for i in cos}
    overlap = {i: len(query_words & w) / len(query_words) if query_words else 0.0 for i, w in words.items()}
    best = max(cos[i] for i in window.idx)
    rows = []
    for i in window.idx:
        near = [j for j in (i - 1, i + 1) if j in cos]
        rows.append(
            [
                cos[i],
                max((cos[j] for j in near), default=0.0),
                cos[i] - best,
                overlap[i],
                max((overlap[j] for j in near), default=0.0),
                float(i in window.core),
                1.0 / (1.0 + rank[i]) if i in rank else 0.0,
                math.log1p(len(messages[i].text.split())),
                float(messages[i].role == "assistant"),
            ]
        )
    return np.asarray(rows, dtype=np.float64)


def featurize(
    question: Question, history: History, retrieved: Sequence[int], windows: Sequence[Window], dense
) -> list[np.ndarray]:
    """Feature rows of every window; `dense` is the job's DenseRetriever (cached message embeddings)."""
    messages = history.messages
    needed = sorted({j for w in windows for i in w.idx for j in (i - 1, i, i + 1) if 0 <= j < len(messages)})
    matrix, _ = dense.embed([dense.render(messages[i]) for i in needed])
    vectors = dict(zip(needed, matrix, strict=True)) if needed else {}
    query_vec = dense.embed_query(question.text)
    query_words = set(_WORDS(question.text))
    rank = {idx: r for r, idx in enumerate(retrieved)}
    return [window_features(w, messages, vectors, query_vec, query_words, rank) for w in windows]


def window_reward(gold: Sequence[bool], keep: Sequence[bool], eta: float = ETA) -> float:
    """The paper's action reward of one window's decisions."""
    return action_reward(*category_accuracy(gold, ["KEEP" if k else "DROP" for k in keep]), eta)


def best_threshold(probs: Sequence[np.ndarray], gold: Sequence[np.ndarray], eta: float = ETA) -> float:
    """The threshold (over a 0.01 grid) of the highest mean action reward over windows; ties go low."""
    if not probs:
        raise ValueError("no validation windows to choose a threshold on")
    grid = np.round(np.arange(0.0, 1.0, 0.01), 2)
    mean = [np.mean([window_reward(g, p >= t, eta) for p, g in zip(probs, gold, strict=True)]) for t in grid]
    return float(grid[int(np.argmax(mean))])


class ExtractiveGate:
    """Retrieve n, window with radius w, keep the messages the trained gate scores at or above threshold.

    `model` is a gate JSON written by task=train_gate (null = the bundled synthetic-trained one);
    `threshold` overrides the one stored with it; `dense` names the job's dense retriever whose
    encoder and embedding cache the features use.
    """

    needs_retrieval = True
    roles = ()

    def __init__(
        self,
        name: str = "extractive_gate",
        n: int | None = None,
        radius: int = 2,
        max_len: int = 8,
        stride: int = 7,
        model: str | None = None,
        threshold: float | None = None,
        dense: str = "dense",
    ):
        self.name, self.n, self.radius, self.max_len, self.stride = name, n, radius, max_len, stride
        self.model = model or BUNDLED
        self.gate = GateModel.load(self.model)
        if threshold is not None:
            if not 0.0 <= threshold <= 1.0:
                raise ValueError(f"threshold must lie in [0, 1], got {threshold}")
            self.gate.threshold = float(threshold)
        self.dense = dense

    async def build(self, question: Question, history: History, ctx: Context) -> MemoryBlock:
        n = self.n if self.n is not None else ctx.retriever.n
        result, retrieval_s = ctx.search(question, history, n)
        windows = build_windows(result.indices, len(history.messages), self.radius, self.max_len, self.stride)
        t0 = time.perf_counter()
        # embedding work, off the event loop (the agent service keeps answering other requests meanwhile)
        dense = ctx.dense(self.dense)
        self.gate.check_encoder(dense, f"method {self.name!r} (gate {self.model})")
        features = await asyncio.to_thread(featurize, question, history, result.indices, windows, dense)
        setup_s = time.perf_counter() - t0
        records, decisions = [], []
        for window, x in zip(windows, features, strict=True):
            t1 = time.perf_counter()
            probs = self.gate.prob(x)
            ops = [
                Decision("KEEP", history.messages[i].text, f"p={p:.3f}")
                if p >= self.gate.threshold
                else Decision("DROP", "", f"p={p:.3f}")
                for i, p in zip(window.idx, probs, strict=True)
            ]
            decisions.append(ops)
            records.append(
                _record(window, ops, setup_s / len(windows) + time.perf_counter() - t1, history.messages)
            )
        processing_s = time.perf_counter() - t0
        merged = merge_decisions(windows, decisions)
        kept = kept_content(merged)
        return MemoryBlock(
            text=render_raw([history.messages[i] for i in kept]),
            style="raw",
            shown=sorted(kept),
            timings={"retrieval": retrieval_s, "processing": processing_s},
            retrieved=list(result.indices),
            scores=[round(s, 6) for s in result.scores],
            windows=records,
            decided=sorted(merged),
        )


def _record(window: Window, decisions: list[Decision], seconds: float, messages) -> dict:
    """The per-window record LazyMem writes, for a gate that cannot fail its format and calls no model."""
    words = copied_words(decisions, [messages[i].text for i in window.idx])
    return WindowResult(
        window, decisions, "gate_ok", None, True, "", "", 0, seconds, 0, {}, words
    ).to_record()
