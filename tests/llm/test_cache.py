"""The SQLite LLM cache: what its key covers, hits, and safety with several and killed writers."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from lazymem.llm.cache import LLMCache, cache_key
from lazymem.llm.client import ClientConfig, Decoding, LLMClient, json_schema_format

from helpers import ROOT

MSGS = [{"role": "user", "content": "q"}]


def key_of(cfg_changes=None, msgs=MSGS, version="v1", rf=None, sample=0, **decoding) -> str:
    cfg = {"base_url": "http://127.0.0.1:9/v1", "served_name": "m", "model_id": "weights@sha256:aa"}
    c = LLMClient(ClientConfig(**{**cfg, **(cfg_changes or {})}))
    dec = Decoding(**{"temperature": 0.0, "top_p": 0.9, "max_tokens": 64, "seed": 1, **decoding})
    body, extra = c.request(msgs, dec, rf, sample)
    return c.key(body, extra, version, sample)


def test_key_changes_with_every_component():
    base = key_of()
    variants = {
        "served name": key_of({"served_name": "other"}),
        "model identity": key_of({"model_id": "weights@sha256:bb"}),
        "temperature": key_of(temperature=0.7),
        "top_p": key_of(top_p=0.5),
        "max_tokens": key_of(max_tokens=65),
        "seed": key_of(seed=2),
        "thinking": key_of(thinking=True),
        "thinking budget (vLLM)": key_of({"dialect": "vllm"}, thinking_budget=128),
        "prompt version": key_of(version="v2"),
        "messages": key_of(msgs=[{"role": "user", "content": "q2"}]),
        "response format": key_of(rf=json_schema_format({"type": "array"})),
        "sample index": key_of(sample=1),
        "extra body": key_of({"extra_body": {"reasoning_effort": "high"}}),
    }
    assert base == key_of()  # deterministic
    assert base not in variants.values()
    assert len(set(variants.values())) == len(variants), variants


def test_key_ignores_settings_that_do_not_change_the_answer():
    assert key_of() == key_of({"timeout_s": 1, "max_retries": 9, "concurrency": 64})


def test_cache_key_is_canonical():
    assert cache_key({"a": 1, "b": [1, 2]}) == cache_key({"b": [1, 2], "a": 1})


def test_hit_on_repeat_and_counters(tmp_path):
    cache = LLMCache(tmp_path / "c.sqlite")
    assert cache.get("k") is None
    cache.put("k", {"text": "hello", "latency_s": 0.5}, model="m")
    assert cache.get("k") == {"text": "hello", "latency_s": 0.5}
    again = LLMCache(tmp_path / "c.sqlite")  # another handle sees it: it is on disk
    assert again.get("k")["text"] == "hello"
    assert cache.stats() == {"hits": 1, "misses": 1, "writes": 1} and again.stats()["hits"] == 1


WRITER = textwrap.dedent(
    """
    import sys, time
    from lazymem.llm.cache import LLMCache
    path, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    cache = LLMCache(path)
    for i in range(n):
        cache.put(f"{tag}-{i}", {"text": "x" * 200, "i": i}, model=tag)
        if n > 10**6:
            print(i, flush=True)
    """
)


def _writer(path: Path, tag: str, n: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), tag, str(n)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )


def test_two_processes_write_concurrently(tmp_path):
    path = tmp_path / "c.sqlite"
    procs = [_writer(path, tag, 3000) for tag in ("a", "b")]
    assert [p.wait(120) for p in procs] == [0, 0]
    cache = LLMCache(path)
    assert len(cache) == 6000
    assert cache.get("a-2999")["i"] == 2999 and cache.get("b-0")["i"] == 0


def test_writer_killed_with_sigkill_leaves_a_readable_db(tmp_path):
    path = tmp_path / "c.sqlite"
    proc = _writer(path, "k", 10**9)  # writes until killed, printing each committed index
    for _ in range(300):
        line = proc.stdout.readline()
    assert line.strip()
    time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    assert proc.returncode == -signal.SIGKILL
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    cache = LLMCache(path)
    n = len(cache)
    assert n >= 300  # everything reported as committed is there
    assert cache.get("k-299")["i"] == 299
    cache.put("after", {"text": "still writable"})
    assert cache.get("after")["text"] == "still writable"
