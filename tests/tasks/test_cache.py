"""task=cache on caches written by the real cache classes: sizes and entries per model, dry-run and
applied pruning by age and model, clear errors."""

from __future__ import annotations

import json
import sqlite3
import time
from types import SimpleNamespace

import numpy as np
import pytest
from omegaconf import OmegaConf

from lazymem.llm.cache import LLMCache
from lazymem.retrieval.embed_cache import EmbeddingCache
from lazymem.tasks import cache as task
from lazymem.validate import ConfigError

from helpers import run_cli

DAY = 86400.0
MINILM = "bundled:all-minilm-l6-v2@x|max_len=None"


def written_at(monkeypatch, when: float):
    monkeypatch.setattr(time, "time", lambda: when)


@pytest.fixture
def caches(tmp_path, monkeypatch):
    """An LLM cache and an embedding cache under tmp_path/cache, each with a 40-day-old entry."""
    root = tmp_path / "cache"
    now = time.time()
    llm, emb = LLMCache(root / "llm.sqlite"), EmbeddingCache(root / "embeddings")
    written_at(monkeypatch, now - 40 * DAY)
    llm.put("old", {"text": "a" * 100}, model="qwen2.5-0.5b")
    emb.put("e5", {"k0": np.ones(8)})
    written_at(monkeypatch, now)
    llm.put("new", {"text": "b"}, model="qwen2.5-0.5b")
    llm.put("other", {"text": "c"}, model="smollm2-135m")
    emb.put(MINILM, {"k1": np.ones(4), "k2": np.zeros(4)})
    monkeypatch.undo()
    llm.close()
    emb.close()
    (root / "notes.sqlite").touch()  # not a cache: ignored
    return root


def run_task(tmp_path, root, **prune):
    cfg = OmegaConf.create({"cache": {"dir": str(root), "prune": {"older_than_days": None, "model": None}}})
    cfg.cache.prune.update(prune)
    out = tmp_path / "run"
    out.mkdir(exist_ok=True)
    report = task.run(cfg, SimpleNamespace(dir=out))
    assert json.loads((out / "cache.json").read_text()) == report
    return {c["kind"]: c for c in report["caches"]}


def test_shows_entries_and_sizes_per_model(tmp_path, caches, capsys):
    found = run_task(tmp_path, caches)
    assert set(found) == {"llm", "embeddings"}
    llm = found["llm"]["models"]
    assert {m: s["entries"] for m, s in llm.items()} == {"qwen2.5-0.5b": 2, "smollm2-135m": 1}
    assert llm["qwen2.5-0.5b"]["bytes"] > 100 and llm["qwen2.5-0.5b"]["oldest"] < time.time() - 39 * DAY
    emb = found["embeddings"]["models"]
    assert {m: (s["entries"], s["bytes"]) for m, s in emb.items()} == {"e5": (1, 32), MINILM: (2, 32)}
    assert found["llm"]["bytes"] > 0 and "would_prune" not in found["llm"]
    assert "| smollm2-135m | 1 |" in capsys.readouterr().out


def test_prune_is_a_dry_run_unless_applied(tmp_path, caches, capsys):
    found = run_task(tmp_path, caches, older_than_days=30)
    assert found["llm"]["would_prune"] == {"qwen2.5-0.5b": 1} and found["embeddings"]["would_prune"] == {
        "e5": 1
    }
    assert "dry run" in capsys.readouterr().out
    assert len(LLMCache(caches / "llm.sqlite")) == 3  # nothing deleted

    found = run_task(tmp_path, caches, older_than_days=30, apply=True)
    assert found["llm"]["pruned"] == {"qwen2.5-0.5b": 1}
    llm = LLMCache(caches / "llm.sqlite")
    assert len(llm) == 2 and llm.get("old") is None and llm.get("new") == {"text": "b"}
    emb = EmbeddingCache(caches / "embeddings")
    assert emb.count() == 2 and emb.count("e5") == 0


def test_prune_by_model_name_or_glob(tmp_path, caches):
    found = run_task(tmp_path, caches, model="smollm2-135m", apply=True)
    assert found["llm"]["pruned"] == {"smollm2-135m": 1} and found["embeddings"]["pruned"] == {}
    found = run_task(tmp_path, caches, model="bundled:all-minilm*", apply=True)
    assert found["embeddings"]["pruned"] == {MINILM: 2}
    assert EmbeddingCache(caches / "embeddings").summary().keys() == {"e5"}
    # both filters: only entries matching both
    found = run_task(tmp_path, caches, model="qwen*", older_than_days=1)
    assert found["llm"]["would_prune"] == {"qwen2.5-0.5b": 1}


@pytest.mark.parametrize(
    ("prune", "message"),
    [
        ({"apply": True}, "needs cache.prune.older_than_days or cache.prune.model"),
        ({"older_than_days": -1}, "older_than_days"),
        ({"older_than_days": "old"}, "older_than_days"),
        ({"model": ""}, "cache.prune.model"),
    ],
)
def test_bad_prune_settings_are_refused(tmp_path, caches, prune, message):
    with pytest.raises(ConfigError, match=message):
        run_task(tmp_path, caches, **prune)


def test_a_missing_cache_folder_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="no such folder"):
        run_task(tmp_path, tmp_path / "nothing")


def test_an_embedding_cache_from_before_created_gets_dated(tmp_path):
    path = tmp_path / "embeddings.sqlite"
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE embeddings (model TEXT NOT NULL, key TEXT NOT NULL, dim INTEGER NOT NULL, "
        "vec BLOB NOT NULL, PRIMARY KEY (model, key)) WITHOUT ROWID"
    )
    conn.execute("INSERT INTO embeddings VALUES ('m', 'k', 1, ?)", (np.ones(1, np.float32).tobytes(),))
    conn.commit()
    conn.close()
    before = time.time()
    cache = EmbeddingCache(tmp_path)
    assert cache.summary()["m"]["oldest"] >= before
    assert cache.get("m", ["k"])["k"].tolist() == [1.0]


def test_task_cache_from_the_command_line(tmp_path, caches):
    out = run_cli(
        "task=cache", f"paths.cache={caches}", "cache.prune.model=smollm2*", f"hydra.run.dir={tmp_path}/r"
    )
    assert out.returncode == 0, out.stderr
    assert "would drop 1 entries" in out.stdout and "dry run" in out.stdout
    out = run_cli(
        "task=cache", f"paths.cache={caches}", "cache.prune.apply=true", f"hydra.run.dir={tmp_path}/r2"
    )
    assert out.returncode != 0 and "cache.prune.apply=true needs" in out.stderr
