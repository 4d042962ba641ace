"""task=train_gate's fast parts: its stops before any work (no gate settings, a gate of another retrieval, no
gold evidence), the train/val data, the windows and labelled examples, the scores of a gate and the report.
The full training run through the CLI: tests/e2e/test_train_gate.py."""

from __future__ import annotations

import hashlib
import json
import re
from types import SimpleNamespace

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from lazymem.conf import CONF_DIR
from lazymem.construct.render import render_raw
from lazymem.construct.windows import build_windows
from lazymem.data import synthetic
from lazymem.data.schema import Dataset
from lazymem.methods.extractive_gate import BUNDLED, FEATURES, GateModel, window_reward
from lazymem.retrieval.bm25 import BM25Retriever
from lazymem.retrieval.hybrid import HybridRetriever
from lazymem.tasks import train_gate
from lazymem.tokens import count_tokens

GATE = OmegaConf.create({"n": None, "radius": 1, "max_len": 8, "stride": 7})


class HashDense:
    """Bag-of-words hashing vectors in place of the bi-encoder: texts sharing words point alike."""

    template, query_template = "{text}", "{query}"
    encoder = SimpleNamespace(model_spec="hash-64", max_seq_length=None)

    def render(self, message) -> str:
        return message.text

    def embed(self, texts):
        out = np.zeros((len(texts), 64))
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % 64] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9), len(texts)

    def embed_query(self, query: str) -> np.ndarray:
        return self.embed([query])[0][0]


@pytest.fixture(scope="module")
def data() -> Dataset:
    """Six questions with gold evidence and one abstention question without."""
    return synthetic.load(per_type=1, abstention=1, sessions=3, turns=2)


def bm25(n: int = 5) -> HybridRetriever:
    return HybridRetriever({"bm25": BM25Retriever()}, n=n)


def config(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def fake_run(tmp_path):
    sources = []
    return SimpleNamespace(dir=tmp_path, meta=SimpleNamespace(add_dataset=sources.append), sources=sources)


def even_gate() -> GateModel:
    """Probability 0.5 for every message."""
    n = len(FEATURES)
    return GateModel(weights=np.zeros(n), bias=0.0, mean=np.zeros(n), std=np.ones(n))


def test_a_job_without_the_gate_settings_names_the_experiment_to_run(tmp_path):
    with pytest.raises(SystemExit) as err:
        train_gate.run(config("task=train_gate"), fake_run(tmp_path))
    assert (
        err.value.code
        == "error: task=train_gate needs the gate settings: run it with +experiment=train_gate_cpu"
    )


def test_a_gate_of_another_retrieval_is_refused_before_any_work(tmp_path):
    cfg = config(
        "+experiment=train_gate_cpu",
        f"gate.model={BUNDLED}",
        "retrieval.retrievers.dense.template='{text}'",  # the bundled gate was trained on "{role}: {text}"
        f"paths.cache={tmp_path / 'cache'}",
    )
    with pytest.raises(ValueError, match=rf"^gate.model {re.escape(str(BUNDLED))}: the gate was trained on "):
        train_gate.run(cfg, fake_run(tmp_path))
    assert not (tmp_path / "gate.json").exists() and not (tmp_path / "cache").exists()


def test_a_missing_dense_retriever_is_named(tmp_path):
    cfg = config("+experiment=train_gate_cpu", "gate.dense=nope", f"paths.cache={tmp_path}")
    with pytest.raises(ValueError, match="no dense retriever named 'nope'"):
        train_gate.run(cfg, fake_run(tmp_path))


def test_training_data_without_gold_evidence_stops_naming_the_split(tmp_path):
    cfg = config(
        "+experiment=train_gate_cpu",
        "data.loader.per_type=0",
        "data.loader.abstention=6",  # abstention questions have no evidence
        f"paths.cache={tmp_path / 'cache'}",
    )
    run = fake_run(tmp_path)
    with pytest.raises(SystemExit) as err:
        train_gate.run(cfg, run)
    assert err.value.code == "error: no train question with gold evidence to learn the gate from"
    assert [s["split"] for s in run.sources] == ["train"]  # the training data was recorded first
    assert not (tmp_path / "gate.json").exists()


def test_the_data_splits_into_disjoint_train_and_val():
    cfg = config("+experiment=train_gate_cpu", "data.loader.per_type=6", "data.loader.abstention=0")
    train, val = train_gate._datasets(cfg.data, cfg.gate.val_path)
    ids = {q.id for q in synthetic.load(per_type=6, abstention=0).questions}
    assert (train.source["split"], val.source["split"]) == ("train", "val")
    assert train.questions and val.questions
    train_ids, val_ids = {q.id for q in train.questions}, {q.id for q in val.questions}
    assert not train_ids & val_ids and train_ids | val_ids < ids  # the test split is left out
    assert len(train_ids) > len(val_ids)


def test_a_val_file_validates_on_all_of_it_and_all_of_data_trains(tmp_path):
    for name, seed in (("train", 1), ("val", 2)):
        (tmp_path / f"{name}.json").write_text(json.dumps(synthetic.generate(1, 0, 3, 2, seed)))
    cfg = config(
        "+experiment=train_gate_cpu",
        "data=longmemeval",
        f"data.path={tmp_path / 'train.json'}",
        "data.limit=4",
    )
    train, val = train_gate._datasets(cfg.data, str(tmp_path / "val.json"))
    assert len(train.questions) == 4 and train.source["path"] == str(tmp_path / "train.json")
    assert len(val.questions) == 6 and val.source["path"] == str(tmp_path / "val.json")  # no limit, no split
    assert cfg.data.path == str(tmp_path / "train.json") and cfg.data.limit == 4  # the job's data untouched


def test_windows_cover_the_retrieval_of_every_question_with_gold(data):
    retriever = bm25()
    found = list(train_gate.question_windows(data, retriever, GATE))
    assert [q.id for q, *_ in found] == [q.id for q in data.questions if q.gold_idx]
    assert len(found) == len(data.questions) - 1  # the abstention question has no gold
    for q, history, retrieved, windows in found:
        assert history is data.history(q)
        assert retrieved == retriever.search(history, q.text, 5).indices and 0 < len(retrieved) <= 5
        assert windows == build_windows(retrieved, len(history.messages), 1, 8, 7)
        assert {i for w in windows for i in w.core} == set(retrieved)  # each retrieved message is a core


def test_gate_n_sets_the_retrieval_depth(data):
    shallow = OmegaConf.merge(GATE, {"n": 1})
    assert all(len(r) == 1 for _, _, r, _ in train_gate.question_windows(data, bm25(), shallow))


def test_examples_are_one_feature_row_and_one_gold_label_per_window_message(data):
    xs, ys = train_gate._examples(data, bm25(), HashDense(), GATE, "train")
    found = list(train_gate.question_windows(data, bm25(), GATE))
    windows = [(q, w) for q, _, _, ws in found for w in ws]
    assert len(xs) == len(ys) == len(windows)
    for x, y, (q, w) in zip(xs, ys, windows, strict=True):
        assert x.shape == (len(w.idx), len(FEATURES))
        assert y.tolist() == [i in q.gold_idx for i in w.idx]
    assert np.concatenate(ys).any() and not np.concatenate(ys).all()  # both classes: a gate can be fit


def test_examples_without_gold_evidence_stop_naming_the_split():
    abstentions = synthetic.load(per_type=0, abstention=2, sessions=3, turns=2)
    with pytest.raises(SystemExit) as err:
        train_gate._examples(abstentions, bm25(), HashDense(), GATE, "val")
    assert err.value.code == "error: no val question with gold evidence to learn the gate from"


def test_threshold_zero_keeps_every_window_message(data):
    retriever = bm25()
    s = train_gate._scores(even_gate(), data, retriever, HashDense(), GATE, 0.0)
    found = list(train_gate.question_windows(data, retriever, GATE))
    rewards = [
        window_reward([i in q.gold_idx for i in w.idx], [True] * len(w)) for q, _, _, ws in found for w in ws
    ]
    tokens = [
        count_tokens(render_raw([h.messages[i] for i in sorted({i for w in ws for i in w.idx})]))
        for _, h, _, ws in found
    ]
    assert s["threshold"] == 0.0
    assert s["gold_kept"] == 1.0 and s["nongold_dropped"] == 0.0
    assert s["action_reward"] == pytest.approx(np.mean(rewards))
    assert s["memory_tokens"] == pytest.approx(np.mean(tokens))
    assert s["ms_per_window"] > 0


def test_a_threshold_above_every_probability_drops_everything(data):
    s = train_gate._scores(even_gate(), data, bm25(), HashDense(), GATE, 0.6)
    assert (s["gold_kept"], s["nongold_dropped"], s["memory_tokens"]) == (0.0, 1.0, 0.0)
    assert 0.0 < s["action_reward"] < 1.0


def test_gold_that_no_window_holds_is_not_counted_against_the_gate(data):
    """Gold evidence retrieval missed is retrieval's miss: keeping every window message keeps all the gold
    the gate was shown, whatever was never shown to it."""
    retriever, gate = bm25(1), OmegaConf.merge(GATE, {"radius": 0})
    shown = missed = 0
    for q, _, _, windows in train_gate.question_windows(data, retriever, gate):
        decided = {i for w in windows for i in w.idx}
        shown, missed = shown + len(decided & set(q.gold_idx)), missed + len(set(q.gold_idx) - decided)
    assert shown and missed  # some gold in the windows, some left out
    assert train_gate._scores(even_gate(), data, retriever, HashDense(), gate, 0.0)["gold_kept"] == 1.0


def report(train: dict) -> dict:
    row = {
        "gold_kept": 0.75,
        "nongold_dropped": 0.5,
        "action_reward": 0.8,
        "memory_tokens": 123.4,
        "ms_per_window": 1.26,
    }
    return {
        "train": train,
        "val": {"questions": 4},
        "seconds": 2.5,
        "validation": {"gate": {"threshold": 0.37, **row}, "keep_all": {"threshold": 0.0, **row}},
    }


def test_the_report_table_has_the_gate_beside_keeping_everything():
    md = train_gate.render(report({"questions": 9, "messages": 120}))
    lines = md.splitlines()
    assert lines[0] == "## Extractive gate (trained on 9 questions), scored on 4 questions with gold; 2.5 s"
    assert lines[2].startswith("| | threshold | gold kept | non-gold dropped | action reward |")
    assert lines[4] == "| gate | 0.37 | 0.750 | 0.500 | 0.800 | 123 | 1.3 |"
    assert lines[5] == "| keep_all | 0.00 | 0.750 | 0.500 | 0.800 | 123 | 1.3 |"
    assert len(lines) == 6


def test_the_report_of_a_given_gate_names_its_file():
    md = train_gate.render(report({"model": "/runs/x/gate.json"}))
    assert md.splitlines()[0].startswith("## Extractive gate (/runs/x/gate.json), scored on 4 questions")


@pytest.mark.slow
def test_a_given_gate_is_scored_on_every_question_without_training(tmp_path):
    """gate.model: the bundled gate on the CPU default retrieval (the real MiniLM), nothing fit."""
    cfg = config(
        "+experiment=train_gate_cpu",
        "data.loader.per_type=1",
        "data.loader.abstention=1",
        "data.loader.sessions=3",
        "data.loader.turns=2",
        f"gate.model={BUNDLED}",
        f"paths.cache={tmp_path / 'cache'}",
    )
    result = train_gate.run(cfg, fake_run(tmp_path))
    bundled = GateModel.load(BUNDLED)
    assert result["train"] == {"model": str(BUNDLED)} and result["val"] == {"questions": 6}
    assert result["gate"] == bundled.to_dict()
    assert json.loads((tmp_path / "gate.json").read_text()) == bundled.to_dict()
    assert json.loads((tmp_path / "gate_report.json").read_text())["validation"] == result["validation"]
    gate, keep_all = result["validation"]["gate"], result["validation"]["keep_all"]
    assert gate["threshold"] == bundled.threshold and keep_all["threshold"] == 0.0
    assert keep_all["gold_kept"] == 1.0 and keep_all["nongold_dropped"] == 0.0
    assert gate["memory_tokens"] < keep_all["memory_tokens"]
    assert (tmp_path / "gate.md").read_text().startswith(f"## Extractive gate ({BUNDLED}), scored on 6")
