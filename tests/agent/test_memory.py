"""The Python API (`from lazymem import Memory`): sync and async forms over the experiments' configs, and
the LLM gate end to end through the service with the bundled llama.cpp model (slow)."""

from __future__ import annotations

import asyncio
import os

import httpx
import psycopg
import pytest

from lazymem.agent.memory import BadInput
from lazymem.agent.store import UnknownUser
from lazymem.retrieval.embed_cache import EmbeddingCache

from agent_helpers import Service, files_containing
from helpers import EXTENSION
from standin import STANDIN_OVERRIDES, standin_env


def test_users_querying_at_once_share_one_model_server(tmp_path, monkeypatch, toy_modules):
    """Many users' first queries at once (each builds its LLM set) still start a single server."""
    from lazymem import Memory

    monkeypatch.syspath_prepend(str(EXTENSION))  # the toy backend: an in-process server
    overrides = [
        "llm=toy",
        "llm.common.toy.reply='[]'",
        f"hydra.searchpath=[file://{EXTENSION / 'conf'}]",
        f"agent.dir={tmp_path / 'data'}",
        f"paths.cache={tmp_path}",
    ]
    users = [f"u{k}" for k in range(6)]
    with Memory.from_config(overrides) as memory:

        async def go():
            for user in users:
                await memory.aadd(user, [{"role": "user", "text": f"{user} likes tea."}])
            return await asyncio.gather(*(memory.aquery(user, "What do I like?") for user in users))

        recalls = asyncio.run(go())
        assert len(recalls) == len(users) and len(memory._registry) == 1


def test_sync_and_async_forms(tmp_path):
    from lazymem import Memory

    overrides = ["method=rag", "method.top_k=2", f"agent.dir={tmp_path / 'data'}", f"paths.cache={tmp_path}"]
    with Memory.from_config(overrides) as memory:
        ids = memory.add("kim", [{"role": "user", "text": "My bike is red."}, {"role": "user", "text": "Hi"}])
        memory.add("kim", [{"role": "user", "text": "I ski in winter.", "session_id": "s2", "time": "Jan"}])
        recall = memory.query("kim", "What colour is my bike?", now="2025-05-05")
        assert recall.messages[0]["id"] == ids[0] and "red" in recall.text and len(recall.messages) == 2
        user_dirs = list((tmp_path / "data" / "users").iterdir())
        assert len(user_dirs) == 1 and (user_dirs[0] / "embeddings.sqlite").exists()
        with pytest.raises(BadInput, match="role must be a non-empty string"):
            memory.add("kim", [{"text": "no role"}])
        with pytest.raises(UnknownUser):
            memory.query("nobody", "anything?")

        async def async_form():
            assert len(await memory.aexport("kim")) == 3
            return await memory.aforget("kim", [ids[1]])

        assert asyncio.run(async_form()) == 1
        cache = EmbeddingCache(user_dirs[0])  # the forgotten message's vector went; the others stay
        assert cache.count() == 2
        cache.close()
        assert "ski" in memory.query("kim", "What do I do in winter?").text
        assert memory.forget_all("kim") == 2
        assert not user_dirs[0].exists()  # a forgotten user leaves no folder
        with pytest.raises(UnknownUser):
            memory.export("kim")


def test_an_export_reads_page_by_page_and_a_page_read_later_sees_a_forget(tmp_path):
    from lazymem import Memory

    with Memory.from_config(["method=full_history", f"agent.dir={tmp_path}"]) as memory:
        ids = memory.add("kim", [{"role": "user", "text": t} for t in "abcde"])
        assert [[m["text"] for m in part] for part in memory.export_pages("kim", page=2)] == [
            ["a", "b"],
            ["c", "d"],
            ["e"],
        ]
        pages = memory.export_pages("kim", page=2)
        first = next(pages)
        memory.forget("kim", [ids[0], ids[3]])  # one in the page read, one in the next
        later = [m["text"] for part in pages for m in part]
        assert [m["text"] for m in first] == ["a", "b"] and later == ["c", "e"]
        assert [m["id"] for m in memory.export("kim")] == [ids[1], ids[2], ids[4]]
        with pytest.raises(UnknownUser):
            next(memory.export_pages("nobody"))


def test_the_extractive_gate_serves_as_agent_memory(tmp_path):
    """A method without LLM roles that reads the embedding cache from another thread than the indexer."""
    from lazymem import Memory

    overrides = ["method=extractive_gate", f"agent.dir={tmp_path / 'data'}", f"paths.cache={tmp_path}"]
    with Memory.from_config(overrides) as memory:
        texts = ["My bike is red.", "I like tea.", "The weather was grey all week.", "My bike has a bell."]
        ids = memory.add("kim", [{"role": "user", "text": t} for t in texts])
        recall = memory.query("kim", "What colour is my bike?")
        assert ids[0] in [m["id"] for m in recall.messages] and "red" in recall.text
        assert recall.style == "raw" and len(recall.messages) < len(texts)  # verbatim, and some dropped


@pytest.mark.slow
def test_memory_model_gate_and_forget_everywhere(tmp_path):
    """The LLM gate through the service, the memory role on the LLM stand-in (it keeps the messages that
    share a word with the question): the query runs the memory model, whose replies land in the user's LLM
    cache; a forget then leaves the canary in no file at all. (The service on a real llama.cpp server is
    benchmarked by scripts/bench_service.py; tests/e2e/test_evaluate.py serves the same role on llama.cpp.)"""
    canary = "CANARY-5b1d-gate"
    svc = Service(
        tmp_path, *STANDIN_OVERRIDES, env=standin_env({**os.environ, "LAZYMEM_API_KEYS": "k-gate=t"})
    )
    try:
        http = httpx.Client(base_url=svc.url, headers={"Authorization": "Bearer k-gate"}, timeout=600)
        texts = ["I live in Porto.", f"My locker code is {canary}.", "I like jazz.", "Lunch was soup."]
        body = {
            "messages": [
                {"role": "user", "text": t, "time": "2025-04-0" + str(i + 1)} for i, t in enumerate(texts)
            ]
        }
        assert http.post("/v1/users/gina/messages", json=body).status_code == 201
        r = http.post(
            "/v1/users/gina/query", json={"question": "What is my locker code?", "now": "2025-05-01"}
        )
        assert r.status_code == 200, r.text
        found = r.json()
        assert found["style"] == "compressed" and found["timings"]["processing"] > 0
        assert all(m["text"] in found["text"] for m in found["messages"])  # each kept line, as compressed
        dirs = (tmp_path / "data", tmp_path / "cache")
        assert any(p.name == "llm.sqlite" for p in (tmp_path / "data").rglob("*"))
        assert files_containing(canary.encode(), *dirs)
        assert http.delete("/v1/users/gina").json() == {"deleted": 4}
        assert files_containing(canary.encode(), *dirs) == []
        assert canary not in svc.log.read_text()
    finally:
        svc.stop()


def test_added_messages_are_embedded_before_the_first_query(tmp_path):
    overrides = ["method=rag", "method.top_k=3", f"agent.dir={tmp_path / 'data'}", f"paths.cache={tmp_path}"]
    from lazymem import Memory
    from lazymem.retrieval.embed_cache import EmbeddingCache

    with Memory.from_config(overrides) as memory:
        memory.add("kim", [{"role": "user", "text": f"note number {n}"} for n in range(40)])
        memory.add("kim", [{"role": "user", "text": "My bike is red."}])
        memory.add("lee", [{"role": "user", "text": "I ski in winter."}])
        assert memory.index_pending() == 2 and memory.index_pending() == 0
        (user_dir,) = [d for d in (tmp_path / "data" / "users").iterdir() if EmbeddingCache(d).count() == 41]
        recall = memory.query("kim", "What colour is my bike?")
        assert "red" in recall.text and EmbeddingCache(user_dir).count() == 41  # nothing embedded again

        memory.add("kim", [{"role": "user", "text": "I sold the bike; now I walk."}])  # not indexed yet
        assert "walk" in memory.query("kim", "How do I get around now?").text
        assert EmbeddingCache(user_dir).count() == 42


def test_a_partial_forget_on_postgres_drops_the_forgotten_messages_vectors_and_keeps_the_rest(
    tmp_path, pg_dsn
):
    """The keys the real dense retriever names for a deleted message are the ones its indexer stored:
    exactly that vector goes, and the next query embeds nothing again."""
    from lazymem import Memory

    store = ["agent.store.kind=postgres", f"agent.store.dsn={pg_dsn}"]
    overrides = ["method=rag", f"agent.dir={tmp_path / 'data'}", f"paths.cache={tmp_path}", *store]

    def vectors() -> dict[str, float]:
        with psycopg.connect(pg_dsn) as conn:
            rows = conn.execute("SELECT key, created FROM derived WHERE kind = 'embedding'").fetchall()
        return dict(rows)

    with Memory.from_config(overrides) as memory:
        texts = ["My bike is red.", "My locker code is 4711.", "I ski in winter."]
        ids = memory.add("kim", [{"role": "user", "text": t} for t in texts])
        memory.index_pending()
        before = vectors()
        assert len(before) == 3
        memory.forget("kim", [ids[1]])
        after = vectors()
        assert len(after) == 2 and after.items() <= before.items()
        assert "red" in memory.query("kim", "What colour is my bike?").text
        assert vectors() == after  # nothing embedded again


def test_open_users_are_bounded_by_the_messages_their_indexes_hold(tmp_path):
    from lazymem import Memory

    overrides = [
        "method=rag",
        "agent.max_open_messages=5",
        f"agent.dir={tmp_path}",
        f"paths.cache={tmp_path}",
    ]
    with Memory.from_config(overrides) as memory:
        for user in ("ann", "bob"):
            memory.add(user, [{"role": "user", "text": f"{user} note {n}"} for n in range(4)])
        memory.query("ann", "notes?")
        memory.query("bob", "notes?")  # 8 messages open > 5: ann's indexes are closed
        assert [user for _, user in memory._users] == ["bob"]
        memory.add("cy", [{"role": "user", "text": f"cy note {n}"} for n in range(9)])
        memory.query("cy", "notes?")  # over the bound alone: the queried user stays open
        assert [user for _, user in memory._users] == ["cy"]
        assert "ann note" in memory.query("ann", "notes?").text  # reopened when it comes back


class SnapshotSpy:
    """The store, with the `after` of every snapshot read recorded."""

    def __init__(self, store):
        self.store, self.reads = store, []

    def snapshot(self, tenant, user, after=0):
        self.reads.append(after)
        return self.store.snapshot(tenant, user, after)

    def __getattr__(self, name):
        return getattr(self.store, name)


def test_a_query_reads_only_what_was_added_since_and_all_after_a_deletion_elsewhere(tmp_path):
    from lazymem import Memory

    overrides = ["method=rag", "method.top_k=5", f"agent.dir={tmp_path / 'data'}", f"paths.cache={tmp_path}"]
    with Memory.from_config(overrides) as mine, Memory.from_config(overrides) as other:
        mine.store = spy = SnapshotSpy(mine.store)
        ids = mine.add("kim", [{"role": "user", "text": t} for t in ("My bike is red.", "I like tea.")])
        assert "red" in mine.query("kim", "What colour is my bike?").text
        assert spy.reads == [0]
        new = mine.add("kim", [{"role": "user", "text": "My locker code is 4711."}])
        assert "4711" in mine.query("kim", "What is my locker code?").text
        assert spy.reads == [0, ids[-1]]  # only the new message was read
        other.forget("kim", [new[0]])  # another process (a replica) deletes a message
        recall = mine.query("kim", "What is my locker code?")
        assert "4711" not in recall.text and [m["id"] for m in recall.messages] == ids
        assert spy.reads == [0, ids[-1], new[0], 0]  # the generation moved: everything read again
