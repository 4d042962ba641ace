"""The Python API (`from lazymem import Memory`): sync and async forms over the experiments' configs, and
the LLM gate end to end through the service with the bundled llama.cpp model (slow)."""

from __future__ import annotations

import asyncio
import os

import httpx
import pytest

from lazymem.agent.memory import BadInput, Memory
from lazymem.agent.sqlite_store import SQLiteStore
from lazymem.agent.store import UnknownUser
from lazymem.methods.full_history import FullHistory

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
        assert len(user_dirs) == 1 and any(user_dirs[0].iterdir())  # the user's vectors
        with pytest.raises(BadInput, match="role must be a non-empty string"):
            memory.add("kim", [{"text": "no role"}])
        with pytest.raises(UnknownUser):
            memory.query("nobody", "anything?")

        async def async_form():
            assert len(await memory.aexport("kim")) == 3
            return await memory.aforget("kim", [ids[1]])

        assert asyncio.run(async_form()) == 1  # its vector goes too (tests/agent/test_forgetting.py)
        assert "ski" in memory.query("kim", "What do I do in winter?").text
        assert memory.forget_all("kim") == 2
        assert not user_dirs[0].exists()  # a forgotten user leaves no folder
        with pytest.raises(UnknownUser):
            memory.export("kim")


class Needs:
    """A method by its attributes (Method is a protocol): one that needs retrieval or LLM roles."""

    name = "needs"

    def __init__(self, needs_retrieval: bool, roles: tuple[str, ...] = ()):
        self.needs_retrieval, self.roles = needs_retrieval, roles

    async def build(self, question, history, ctx):
        raise AssertionError("never queried")


def test_a_memory_refuses_a_method_it_cannot_serve(tmp_path):
    store = SQLiteStore(tmp_path)
    with pytest.raises(TypeError, match="^object is not a lazymem.methods.base.Method$"):
        Memory(store, object())
    with pytest.raises(ValueError, match="method 'needs' needs a retriever"):
        Memory(store, Needs(needs_retrieval=True))
    with pytest.raises(ValueError, match=r"calls the LLM roles \['memory'\]: pass `llm`"):
        Memory(store, Needs(needs_retrieval=False, roles=("memory",)))
    store.close()


def test_a_memory_built_from_parts_serves_every_call_and_closes_its_store(tmp_path):
    """The facade without Hydra: a store and a method without retrieval or LLM roles."""
    with Memory(SQLiteStore(tmp_path), FullHistory(), dir=tmp_path) as memory:
        ids = memory.add("kim", [{"role": "user", "text": "I like tea."}, {"role": "user", "text": "Hi."}])
        assert memory.import_("kim", [{"role": "user", "text": "I ski.", "source": "f:1"}]).stored == 1
        assert memory.index_pending() == 1  # claimed and finished, nothing to embed
        assert "tea" in memory.query("kim", "What do I like?").text
        assert memory.forget("kim", [ids[1]]) == 1 and memory.forget("kim", []) == 0
        assert [m["text"] for m in memory.export("kim")] == ["I like tea.", "I ski."]
        for days in (10**400, float("nan"), -1, True):  # an int too large for a float was an OverflowError
            with pytest.raises(BadInput, match="older_than_days must be a finite number >= 0"):
                memory.purge(days)
        assert memory.ready().backlog == 0 and memory.purge(0.0) == {"kim": 2}
        memory.maintain()
        with pytest.raises(UnknownUser):
            memory.forget_all("kim")
    with pytest.raises(Exception, match="closed"):
        memory.store.generations([("default", "kim")])


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
