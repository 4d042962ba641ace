"""Mem0's store (lazymem/methods/mem0_store.py): ingestion plan, the persisted store (reuse, rebuild,
failed builds) and no network. The real mem0ai package and embedded Qdrant run here; the LLM and the
encoder are small fakes (tests/helpers_mem0.py; the runs with a real llama.cpp server are in
tests/e2e/test_mem0.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("mem0", reason="needs the mem0 extra: pip install 'lazymem[mem0]'")

from lazymem.methods.mem0_store import owners, plan  # noqa: E402

from helpers import TESTS  # noqa: E402
from helpers_mem0 import FakeLLM, build, guarded_env, history, spec  # noqa: E402


def test_plan_longmemeval_keeps_roles_and_batches_in_twos():
    adds = plan(history(), batch_size=2)
    assert owners(history()) == ["user"]
    assert [a.indices for a in adds] == [[0, 1], [2], [3, 4], [5]]
    assert adds[0].messages == [
        {"role": "user", "content": "fact 0: user likes item 0"},
        {"role": "assistant", "content": "fact 1: assistant likes item 1"},
    ]
    assert {a.user_id for a in adds} == {"user"}
    assert adds[2].timestamp == "2023/05/02 (Mon) 10:00"


def test_plan_locomo_gives_each_speaker_the_session_from_their_side():
    h = history(speakers=("Caroline", "Melanie"), sessions=1, per_session=2)
    adds = plan(h, batch_size=2)
    assert owners(h) == ["Caroline", "Melanie"]
    assert [(a.user_id, a.messages) for a in adds] == [
        (
            "Caroline",
            [
                {"role": "user", "content": "Caroline: fact 0: Caroline likes item 0"},
                {"role": "assistant", "content": "Melanie: fact 1: Melanie likes item 1"},
            ],
        ),
        (
            "Melanie",
            [
                {"role": "assistant", "content": "Caroline: fact 0: Caroline likes item 0"},
                {"role": "user", "content": "Melanie: fact 1: Melanie likes item 1"},
            ],
        ),
    ]


def test_plan_rejects_a_bad_batch_size():
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        plan(history(), batch_size=0)


def test_store_is_built_once_then_reused_without_llm_calls(tmp_path):
    h, sp = history(), spec(tmp_path)
    llm = FakeLLM()
    store, built, memories = build(h, sp, llm)
    assert built and llm.calls == 4  # one Mem0 add per batch of two messages
    assert [m[2] for m in memories] == [m.text for m in h.messages]  # one memory per message, by session
    ledger = json.loads((store.path / "ledger.json").read_text())
    assert ledger["adds"] == 4 and ledger["llm"]["calls"] == 4 and ledger["llm"]["prompt_tokens"] == 400
    assert ledger["memories"] == 6 and ledger["key"]["batch_size"] == 2

    again = FakeLLM()
    store2, built2, memories2 = build(h, sp, again)
    assert not built2 and again.calls == 0 and store2.path == store.path and memories2 == memories
    assert not list(sp.store_dir.glob(".building-*"))


def test_a_store_under_another_key_is_rebuilt_not_reused(tmp_path):
    h, sp = history(), spec(tmp_path)
    store, _, _ = build(h, sp, FakeLLM())
    # a different configuration is a different store
    other = FakeLLM()
    store_b, built_b, _ = build(h, spec(tmp_path, batch_size=3), other)
    assert built_b and other.calls == 2 and store_b.path != store.path
    # a store written by another mem0 version at the same place is rebuilt
    ledger_path = store.path / "ledger.json"
    ledger = json.loads(ledger_path.read_text())
    ledger["key"]["mem0ai"] = "0.1.0"
    ledger_path.write_text(json.dumps(ledger))
    llm = FakeLLM()
    store_c, built_c, memories = build(h, sp, llm)
    assert built_c and llm.calls == 4 and store_c.path == store.path and len(memories) == 6
    assert json.loads(ledger_path.read_text())["key"]["mem0ai"] != "0.1.0"


def test_a_failed_or_killed_build_never_looks_finished(tmp_path):
    h, sp = history(), spec(tmp_path)
    with pytest.raises(Exception, match="boom"):
        build(h, sp, FakeLLM(fail_on_call=3))
    assert list(sp.store_dir.glob("h1-*")) == [] and not list(sp.store_dir.glob(".building-*"))
    # a killed ingestion's leftover (its process is gone) is cleaned up by the next build of that key
    ref_store, _, reference = build(h, spec(tmp_path / "ref"), FakeLLM())
    digest = ref_store.path.name.rsplit("-", 1)[1]
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    leftover = sp.store_dir / f".building-{digest}-{gone.stdout.strip()}-abcd1234"
    (leftover / "qdrant").mkdir(parents=True)
    store, built, memories = build(h, sp, FakeLLM())
    assert built and memories == reference and not leftover.exists()


def test_network_guard_refuses_and_logs_outbound_connections(tmp_path):
    code = textwrap.dedent(
        """
        import socket
        try:
            socket.create_connection(("192.0.2.1", 80), timeout=1)
        except OSError as e:
            print(e)
        """
    )
    env = guarded_env(tmp_path)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert "network disabled" in out.stdout
    assert (tmp_path / "network.log").read_text().split() == ["192.0.2.1"]


def test_mem0_builds_and_searches_with_no_outbound_connection(tmp_path):
    """Mem0's telemetry, notices and optional model downloads never try the network (MEM0_TELEMETRY=True
    in the environment: the method turns it off), and nothing is written to the real home folder."""
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        sys.path.insert(0, {str(TESTS)!r})
        from helpers_mem0 import FakeLLM, FakeDense, history, spec
        from pathlib import Path
        from lazymem.methods.mem0_store import open_store
        async def go():
            store, built = await open_store(history(), spec(Path({str(tmp_path)!r})), FakeLLM(), FakeDense())
            found = await asyncio.to_thread(store.search, "which item does the user like", 5, 0.0)
            store.close()
            print("built", built, "found", len(found["user"]))
        asyncio.run(go())
        """
    )
    env = guarded_env(tmp_path)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "built True found 5" in out.stdout
    log = tmp_path / "network.log"
    assert not log.exists(), f"outbound connections attempted: {log.read_text()}"
    assert not (tmp_path / "home" / ".mem0").exists()
