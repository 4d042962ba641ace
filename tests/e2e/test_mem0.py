"""method=mem0 end to end on CPU: the real mem0ai package and embedded Qdrant, every run with outbound
connections refused and logged.

One run goes through a real llama.cpp server (SmolLM2-135M, where quality does not matter) over six
messages: Mem0's extraction prompt is ~8k tokens, so each call costs seconds. The store's plumbing
(reruns without ingestion calls, a build killed and redone) answers from the LLM stand-in
(tests/standin.py), which extracts one memory per new message.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("mem0", reason="needs the mem0 extra: pip install 'lazymem[mem0]'")

from lazymem.methods import mem0_store as ms  # noqa: E402

from helpers import ROOT, SCRIPTS, SMOLLM2  # noqa: E402
from helpers_mem0 import guarded_env  # noqa: E402
from standin import STANDIN_OVERRIDES, standin_env  # noqa: E402

sys.path.insert(0, str(SCRIPTS))
from bench_mem0 import truncate_locomo  # noqa: E402


def stored_memories(path: Path) -> list[tuple[str, str, str]]:
    """(owner, timestamp, text) of every memory in the finished embedded store at `path`, read without an
    LLM or an encoder."""
    ledger = ms._read_ledger(path)
    assert ledger is not None, f"{path} is not a finished Mem0 store"
    main = ms.import_mem0(path.parent / "mem0_home")
    spec = ms.StoreSpec(path.parent, None, 1, ledger["key"]["custom_instructions"])
    embedder = SimpleNamespace(dims=ledger["embedding_dims"])
    store = ms.Store(ms.open_memory(main, path, spec, ms.COLLECTION, None, embedder), path, ledger)
    try:
        return store.all_memories()
    finally:
        store.close()


pytestmark = pytest.mark.slow

SMALL = ["task=evaluate", "method=mem0", "logger=none"]
REAL = [
    *SMOLLM2,
    "llm.common.llamacpp.n_ctx=10240",
    "llm.common.decoding.max_tokens=192",
    "llm.common.timeout_s=900",
    # flash attention: Mem0's ~8.6k-token prompt is read in ~2/3 of the time (the answer is not checked)
    "llm.common.llamacpp.extra_args=[--flash_attn,'true']",
]
SYNTHETIC = [
    "data.loader.per_type=1",
    "data.loader.abstention=0",
    "data.loader.sessions=3",
    "data.loader.turns=2",
    "data.limit=1",
]


def lazymem(
    tmp_path: Path,
    run: str,
    *overrides: str,
    cache: Path | None = None,
    wait: bool = True,
    standin: bool = True,
):
    """`python -m lazymem.run` with the store (and the LLM cache, unless given) under tmp_path, the
    network refused; the LLM stand-in answers unless `standin=False` (then SmolLM2 on llama.cpp)."""
    cmd = [
        sys.executable,
        "-m",
        "lazymem.run",
        *SMALL,
        *(STANDIN_OVERRIDES if standin else REAL),
        f"method.store_dir={tmp_path / 'stores'}",
        f"llm.cache_path={cache or tmp_path / 'llm.sqlite'}",
        f"hydra.run.dir={tmp_path / run}",
        *overrides,
    ]
    env = guarded_env(tmp_path)
    if standin:
        env = standin_env(env)
    if not wait:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL)
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)


def records(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "records.jsonl").read_text().splitlines()]


def finished(stores: Path) -> list[Path]:
    return sorted(p.parent for p in stores.glob("*/ledger.json") if not p.parent.name.startswith("."))


def locomo_sample(tmp_path: Path, locomo_file: Path) -> list[str]:
    """LoCoMo's first conversation cut to 4 turns of its first session (2 adds per speaker), 1 question."""
    data = tmp_path / "locomo.json"
    assert truncate_locomo(locomo_file, data, conversation=0, sessions=1, questions=1, messages=4) == 1
    return ["data=locomo", f"data.path={data}", "data.loader.conversations=[0]"]


@pytest.mark.solo
def test_mem0_on_a_real_llama_cpp_server(tmp_path):
    """Mem0's own extraction prompt through our memory role on SmolLM2: the smallest synthetic history
    (3 sessions of 2 messages, one add each; later calls reuse the server's cache of the long prefix)."""
    out = lazymem(tmp_path, "run", *SYNTHETIC, standin=False)
    assert out.returncode == 0, out.stderr[-3000:]
    [rec] = records(tmp_path / "run")
    assert rec["status"] == "ok" and rec["method"] == "mem0"
    ingest = rec["detail"]["ingest"]
    assert ingest["built_now"] and ingest["adds"] == 3 and ingest["llm_calls"] == 3
    assert ingest["llm_prompt_tokens"] > 3000  # Mem0's extraction prompt reached the server
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["llm"]["memory"]["calls"] == 3 and summary["llm"]["memory"]["errors"] == 0
    assert not (tmp_path / "network.log").exists()


def test_synthetic_run_then_rerun_without_ingestion_calls(tmp_path):
    out = lazymem(tmp_path, "run", *SYNTHETIC)
    assert out.returncode == 0, out.stderr[-3000:]
    [rec] = records(tmp_path / "run")
    assert rec["status"] == "ok" and rec["method"] == "mem0"
    ingest = rec["detail"]["ingest"]
    assert ingest["built_now"] and ingest["adds"] == 3 and ingest["llm_calls"] == 3
    assert ingest["memories"] > 0  # the stand-in's extractions were stored
    [store] = finished(tmp_path / "stores")
    assert json.loads((store / "ledger.json").read_text())["owners"] == ["user"]
    assert "| mem0 |" in (tmp_path / "run" / "results.md").read_text()

    out = lazymem(tmp_path, "again", *SYNTHETIC)
    assert out.returncode == 0, out.stderr[-3000:]
    [again] = records(tmp_path / "again")
    assert not again["detail"]["ingest"]["built_now"] and again["memory"] == rec["memory"]
    assert json.loads((tmp_path / "again" / "summary.json").read_text())["llm"]["memory"]["calls"] == 0
    assert not (tmp_path / "network.log").exists()


def cached_calls(cache: Path) -> int:
    """Completions in the run's LLM cache; 0 while it does not exist yet or is busy (look again)."""
    try:
        with closing(sqlite3.connect(f"file:{cache}?mode=ro", uri=True, timeout=30)) as conn:
            return conn.execute("SELECT COUNT(*) FROM completions").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def test_locomo_kill_during_ingestion_then_rerun_gives_the_clean_store(tmp_path, locomo_file):
    data = locomo_sample(tmp_path, locomo_file)
    # 1. killed mid-ingestion, after its first Mem0 call reached the LLM cache (each reply takes 2 s)
    proc = lazymem(tmp_path, "killed", *data, "llm.common.standin.delay_s=2", wait=False)
    try:
        deadline = time.time() + 600
        while time.time() < deadline and proc.poll() is None:
            building = list((tmp_path / "stores").glob(".building-*"))
            if building and cached_calls(tmp_path / "llm.sqlite") >= 1:
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the run ended before it could be killed"
    finally:  # never leave the run going when the test stops early
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert finished(tmp_path / "stores") == [] and list((tmp_path / "stores").glob(".building-*"))

    # 2. the rerun finishes the store (the calls made before the kill come from the LLM cache)
    out = lazymem(tmp_path, "rerun", *data)
    assert out.returncode == 0, out.stderr[-3000:]
    [rec] = records(tmp_path / "rerun")
    assert rec["status"] == "ok" and rec["method"] == "mem0"
    ingest = rec["detail"]["ingest"]
    assert ingest["built_now"] and ingest["adds"] == 4 and ingest["llm_cache_hits"] >= 1
    assert not list((tmp_path / "stores").glob(".building-*"))  # the killed build's folder is gone
    [store] = finished(tmp_path / "stores")
    assert json.loads((store / "ledger.json").read_text())["owners"] == ["Caroline", "Melanie"]

    # 3. an uninterrupted build of the same history (same LLM replies) gives the same store
    clean = tmp_path / "clean"
    clean.mkdir()
    out = lazymem(clean, "run", *data, cache=tmp_path / "llm.sqlite")
    assert out.returncode == 0, out.stderr[-3000:]
    [clean_store] = finished(clean / "stores")
    assert stored_memories(clean_store) == stored_memories(store)
    assert not (tmp_path / "network.log").exists() and not (clean / "network.log").exists()
