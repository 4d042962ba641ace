"""The extractive gate: its logistic model, features, threshold choice and the method's block and records."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

from lazymem.conf import CONF_DIR
from lazymem.construct.windows import Window
from lazymem.data.schema import History, Message, Question
from lazymem.eval.metrics import _construction
from lazymem.methods.base import Context
from lazymem.methods.extractive_gate import (
    BUNDLED,
    FEATURES,
    ExtractiveGate,
    GateModel,
    best_threshold,
    encoder_identity,
    window_features,
    window_reward,
)
from lazymem.retrieval.base import SearchResult

TEXTS = [
    "good morning",
    "I adopted a dog and named her Biscuit",
    "what a lovely name",
    "the weather is grey today",
    "my tax forms are due in April",
    "remember to file them early",
]
HISTORY = History(
    "h", [Message(i, "s1", "2024/01/01", ("user", "assistant")[i % 2], t) for i, t in enumerate(TEXTS)]
)
QUESTION = Question(
    "q", "single-session-user", "What did I name the dog I adopted?", "Biscuit", "h", gold_idx=(1,)
)


def unit(*xs: float) -> np.ndarray:
    v = np.asarray(xs, dtype=np.float64)
    return v / np.linalg.norm(v)


class FakeDense:
    """Two-dimensional 'embeddings': messages about the dog point along the question."""

    encoder = SimpleNamespace(model_spec="fake-2d", max_seq_length=None)
    template, query_template = "{text}", "{query}"

    def render(self, message: Message) -> str:
        return message.text

    def embed(self, texts):
        return np.stack([unit(1, 0.1) if "dog" in t or "Biscuit" in t else unit(0.1, 1) for t in texts]), 0

    def embed_query(self, query: str) -> np.ndarray:
        return unit(1, 0)


class FakeRetriever:
    n = 2

    def index(self, history):
        return None

    def search(self, history, query, n):
        return SearchResult(indices=[1, 4], scores=[0.9, 0.2], timings={})

    def dense(self, name):
        return FakeDense()


def separable(m: int = 200, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(m, len(FEATURES)))
    y = (x[:, 0] + 0.5 * x[:, 3] > 0).astype(float)
    return x, y


def test_fit_learns_the_direction_and_is_deterministic():
    x, y = separable()
    a, b = GateModel.fit(x, y), GateModel.fit(x, y)
    assert np.array_equal(a.weights, b.weights)
    assert a.weights[0] > 0 and a.weights[3] > 0
    assert ((a.prob(x) >= 0.5) == (y == 1)).mean() > 0.95


def test_fit_rejects_one_class_and_bad_shapes():
    x, y = separable()
    with pytest.raises(ValueError, match="both kept"):
        GateModel.fit(x, np.zeros(len(x)))
    with pytest.raises(ValueError, match="shape"):
        GateModel.fit(x[:, :3], y)


def test_save_and_load_round_trip(tmp_path):
    x, y = separable()
    model = GateModel.fit(x, y)
    model.threshold = 0.3
    path = tmp_path / "gate.json"
    path.write_text(__import__("json").dumps(model.to_dict()))
    loaded = GateModel.load(path)
    assert loaded.threshold == 0.3 and np.allclose(loaded.prob(x), model.prob(x)) and loaded.encoder is None
    model.encoder = encoder_identity(FakeDense())
    path.write_text(__import__("json").dumps(model.to_dict()))
    assert GateModel.load(path).encoder == {
        "model": "fake-2d",
        "max_seq_length": None,
        "template": "{text}",
        "query_template": "{query}",
    }
    data = model.to_dict() | {"features": ["cos"]}
    path.write_text(__import__("json").dumps(data))
    with pytest.raises(ValueError, match="features"):
        GateModel.load(path)


def test_the_bundled_gate_loads_and_prefers_relevant_messages():
    gate = GateModel.load(BUNDLED)
    assert 0.0 <= gate.threshold <= 1.0
    relevant = np.array([[0.7, 0.3, 0.0, 0.8, 0.1, 1.0, 1.0, 2.0, 0.0]])
    unrelated = np.array([[0.05, 0.05, -0.65, 0.0, 0.0, 0.0, 0.0, 2.0, 0.0]])
    assert gate.prob(relevant)[0] > gate.prob(unrelated)[0]


def test_window_reward_is_the_action_reward():
    assert window_reward([True, False], [True, True]) == pytest.approx(0.915)
    assert window_reward([True, False], [True, False]) == pytest.approx(1.0)
    assert window_reward([False, False], [True, False]) == pytest.approx(0.5)


def test_best_threshold_maximises_the_mean_reward():
    probs = [np.array([0.9, 0.2]), np.array([0.3, 0.1])]
    gold = [np.array([True, False]), np.array([False, False])]
    # any threshold in (0.3, 0.9] keeps the gold message and drops the rest; the lowest such wins
    assert best_threshold(probs, gold) == pytest.approx(0.31)
    with pytest.raises(ValueError):
        best_threshold([], [])


def test_window_features_use_neighbours_overlap_and_rank():
    window = Window(idx=(0, 1, 2), core=(1,), group=0)
    dense = FakeDense()
    vectors = dict(zip(range(4), dense.embed(TEXTS[:4])[0], strict=True))
    x = window_features(window, HISTORY.messages, vectors, unit(1, 0), {"dog", "name", "adopted"}, {1: 0})
    row = dict(zip(FEATURES, x[1], strict=True))
    assert x.shape == (3, len(FEATURES))
    assert row["retrieved"] == 1.0 and row["rank"] == 1.0 and row["cos_gap"] == 0.0
    assert row["overlap"] == pytest.approx(2 / 3)  # "adopted", "dog"; "named" is not "name"
    assert x[0][FEATURES.index("cos_context")] == pytest.approx(row["cos"])  # message 0's neighbour is 1
    assert x[0][FEATURES.index("retrieved")] == 0.0 and x[2][FEATURES.index("assistant")] == 0.0


def test_the_method_keeps_verbatim_and_writes_lazymem_window_records():
    gate = ExtractiveGate(radius=1)
    gate.gate.threshold, gate.gate.encoder = 0.5, encoder_identity(FakeDense())
    gate.gate.prob = lambda x: x[:, FEATURES.index("cos")]  # keep what points along the question
    block = asyncio.run(gate.build(QUESTION, HISTORY, Context(retriever=FakeRetriever())))
    assert block.style == "raw" and block.shown == [1]
    assert block.text == "[2024/01/01] assistant: I adopted a dog and named her Biscuit"
    assert block.decided == [0, 1, 2, 3, 4, 5]
    assert all(w["outcome"] == "gate_ok" and w["format_ok"] for w in block.windows)
    kept = [d for w in block.windows for d in w["decisions"] if d[0] == "KEEP"]
    assert [d[1] for d in kept] == [TEXTS[1]]
    record = {"gold_idx": list(QUESTION.gold_idx), "shown": block.shown, "decided": block.decided}
    record["windows"] = block.windows
    assert _construction([record]) == {
        "gold_decided": 1,
        "gold_kept": 1.0,
        "nongold_decided": 5,
        "nongold_dropped": 1.0,
        "kept_words_in_source": 1.0,  # it keeps a message's own text
    }
    assert sum(w["source_words"][1] for w in block.windows) == len(TEXTS[1].split())


def test_a_gate_refuses_a_dense_retriever_other_than_the_one_it_was_trained_with():
    gate = ExtractiveGate(radius=1)  # the bundled gate, trained with MiniLM
    with pytest.raises(ValueError, match="trained on features of the dense retriever.*fake-2d"):
        asyncio.run(gate.build(QUESTION, HISTORY, Context(retriever=FakeRetriever())))
    gate.gate.encoder = None  # a gate.json that does not record its encoder is taken as it is
    assert asyncio.run(gate.build(QUESTION, HISTORY, Context(retriever=FakeRetriever()))).style == "raw"


def test_the_bundled_gate_records_the_cpu_default_dense_retriever():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        retrieval = compose(overrides=["+retrieval=hybrid_loo", "+paths=default"]).retrieval
    dense = instantiate(retrieval.retrievers.dense, cache=None)  # the encoder loads lazily: nothing runs
    assert GateModel.load(BUNDLED).encoder == encoder_identity(dense)
    GateModel.load(BUNDLED).check_encoder(dense, "bundled")
    dense.template = "{text}"
    with pytest.raises(ValueError, match="train a gate under this retrieval"):
        GateModel.load(BUNDLED).check_encoder(dense, "bundled")


def test_config_instantiates_and_rejects_a_bad_threshold():
    cfg = OmegaConf.load(CONF_DIR / "method" / "extractive_gate.yaml")
    cfg.radius = 1
    assert isinstance(instantiate(cfg), ExtractiveGate)
    with pytest.raises(ValueError, match="threshold"):
        ExtractiveGate(threshold=1.5)
