"""Moving a user's history in and out (lazymem/agent/moving.py): an import in batches that says what it did
and, when a message stops it, what it kept; an export read page by page. The vectors that travel with them
are tested in tests/agent/test_vectors.py."""

from __future__ import annotations

import pytest

from lazymem.agent.errors import BadInput, UnknownUser
from lazymem.agent.inputs import Limits
from lazymem.agent.moving import Imported, ImportStopped, Moving
from lazymem.agent.open_users import OpenUsers
from lazymem.agent.runtime import Runtime
from lazymem.agent.sqlite_store import SQLiteStore


@pytest.fixture
def moving(tmp_path):
    """Moving over a SQLite store, batches of at most 2 messages, without retrieval."""
    store, runtime = SQLiteStore(tmp_path), Runtime()
    users = OpenUsers(store, runtime, tmp_path, None, lambda derived: None)
    yield Moving(store, runtime, users, Limits(max_messages_per_add=2), None)
    runtime.close()
    store.close()


def lines(*texts: str) -> list[dict]:
    return [{"role": "user", "text": t, "source": f"f:{t}"} for t in texts]


def test_what_an_import_did_adds_up_and_a_stop_says_what_was_kept():
    assert Imported(2, 1) + Imported(3) == Imported(5, 1)
    stop = ImportStopped("line 4: text must be a non-empty string", Imported(3, 1))
    assert isinstance(stop, BadInput) and stop.imported == Imported(3, 1)
    assert stop.reason == "line 4: text must be a non-empty string"
    assert str(stop) == (
        "line 4: text must be a non-empty string (3 messages of this import stored before it, "
        "1 skipped as already stored)"
    )
    assert str(ImportStopped("bad", Imported())) == "bad (0 messages of this import stored before it)"


def test_an_import_goes_in_bounded_batches_and_a_second_one_skips_what_is_stored(moving):
    done: list[int] = []
    run = moving.runtime.run
    assert run(moving.import_("t", "kim", iter(lines("a", "b", "c")), 50, done.append)) == Imported(3)
    assert done == [2, 3]  # batch_size is bounded by agent.limits.max_messages_per_add
    assert run(moving.import_("t", "kim", lines("a", "b", "c", "d"), 1)) == Imported(1, 3)
    assert [m.text for m in moving.store.snapshot("t", "kim").messages] == ["a", "b", "c", "d"]


def test_a_bad_message_stops_the_import_keeping_the_batches_before_its_own(moving):
    bad = [*lines("a", "b", "c"), {"role": "user", "text": ""}, *lines("e")]
    with pytest.raises(ImportStopped) as stopped:
        moving.runtime.run(moving.import_("t", "kim", bad, where=lambda n: f"line {n + 10}"))
    assert stopped.value.imported == Imported(2) and stopped.value.reason.startswith("line 13: text")
    assert [m.text for m in moving.store.snapshot("t", "kim").messages] == ["a", "b"]  # not c, its batch's
    for not_a_list in ("abc", {"role": "user"}, 7):
        with pytest.raises(BadInput, match="messages must be an iterable of messages"):
            moving.runtime.run(moving.import_("t", "kim", not_a_list))


def test_without_retrieval_carried_vectors_are_ignored(moving):
    line = {**lines("a")[0], "vectors": {"enc@1": {"k": "AAAAAA=="}}}
    assert moving.runtime.run(moving.import_("t", "kim", [line])) == Imported(1)
    (page,) = moving.runtime.iterate(moving.pages("t", "kim", vectors=True))
    assert [m["text"] for m in page] == ["a"] and "vectors" not in page[0]


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
        with pytest.raises(BadInput, match="user_id"):  # checked when the first page is wanted
            next(memory.export_pages(""))


def test_an_export_with_vectors_opens_the_users_cache_once_and_a_forget_between_pages_holds(
    tmp_path, monkeypatch
):
    from lazymem import Memory
    from lazymem.agent.user_retrieval import LocalUserStorage
    from lazymem.agent.vector_blocks import BlockEmbeddingCache

    opened, closed = [], []
    open_cache, close_cache = LocalUserStorage.embedding_cache, BlockEmbeddingCache.close
    monkeypatch.setattr(LocalUserStorage, "embedding_cache", lambda s: opened.append(1) or open_cache(s))
    monkeypatch.setattr(BlockEmbeddingCache, "close", lambda s: closed.append(1) or close_cache(s))
    overrides = ["method=rag", f"agent.dir={tmp_path}", f"paths.cache={tmp_path / 'cache'}"]
    with Memory.from_config(overrides) as memory:
        ids = memory.add("kim", [{"role": "user", "text": f"note {t}"} for t in "abcde"])
        memory.index_pending()
        opened.clear(), closed.clear()
        pages = memory.export_pages("kim", vectors=True, page=2)
        first = next(pages)
        assert (len(opened), len(closed)) == (1, 0)
        memory.forget("kim", [ids[3]])  # its vector goes while the export's cache is open
        opened.clear(), closed.clear()  # the forget opens and closes caches of its own
        rest = [m for part in pages for m in part]
        assert [m["text"] for m in [*first, *rest]] == ["note a", "note b", "note c", "note e"]
        assert all(m.get("vectors") for m in [*first, *rest])  # the others' vectors were kept
        assert (len(opened), len(closed)) == (0, 1)  # the later pages read the same cache, closed at the end


def test_an_old_export_with_vectors_brings_back_neither_the_message_nor_its_vector(tmp_path):
    """The import of an export taken before a forget skips the forgotten message, and stores no vector
    that only it had (a vector shared with a message still there, the same text, stays)."""
    import base64

    from lazymem import Memory

    from agent_helpers import files_containing

    common = ["method=rag", f"agent.dir={tmp_path / 'm'}", f"paths.cache={tmp_path}"]
    with Memory.from_config(common) as memory:
        ids = memory.add("kim", [{"role": "user", "text": t} for t in ("ok", "My PIN is 4711.", "ok")])
        memory.index_pending()
        before = memory.export("kim", vectors=True)
        (model,) = before[1]["vectors"]
        (vector,) = [base64.b64decode(v) for v in before[1]["vectors"][model].values()]
        shared = base64.b64decode(next(iter(before[0]["vectors"][model].values())))
        assert memory.forget("kim", ids[1:3]) == 2  # one "ok" stays
        assert files_containing(vector, tmp_path / "m") == []
        done = memory.import_("kim", before)
        assert (done.stored, done.skipped, done.forgotten) == (0, 1, 2)
        assert [m["text"] for m in memory.export("kim")] == ["ok"]
        assert files_containing(vector, tmp_path / "m") == []  # the forgotten message's vector: not back
        assert files_containing(shared, tmp_path / "m")  # "ok"'s vector: the stored "ok" still has it
