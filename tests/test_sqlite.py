"""lazymem.sqlite: connect's WAL mode, busy timeout and schema; a transaction committed or rolled back; the
WAL truncated, waiting for a reader; tables_of reading without writing; summarize per model; prune's dry
run, deletion and model glob."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from lazymem import sqlite

SCHEMA = "CREATE TABLE IF NOT EXISTS replies (model TEXT, key TEXT, body TEXT, created REAL)"
ROWS = [  # model, key, body, created
    ("qwen3-32b", "a", "xx", 100.0),
    ("qwen3-32b", "b", "yyyy", 300.0),
    ("qwen3-4b", "c", "z", 200.0),
    ("Qwen3-4B", "d", "zz", 50.0),
    ("smollm2-135m", "e", "", 400.0),
]


@pytest.fixture
def cache(tmp_path):
    conn = sqlite.connect(tmp_path / "llm.sqlite", 5.0, SCHEMA)
    conn.executemany("INSERT INTO replies VALUES (?, ?, ?, ?)", ROWS)
    yield conn
    conn.close()


def models_left(conn) -> list[str]:
    return [m for (m,) in conn.execute("SELECT model FROM replies ORDER BY key")]


def test_connect_creates_the_folder_and_the_schema(tmp_path):
    path = tmp_path / "deep" / "er" / "cache.sqlite"
    conn = sqlite.connect(path, 1.0, SCHEMA)
    assert path.is_file()
    assert conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall() == [("replies",)]
    conn.close()
    sqlite.connect(path, 1.0, SCHEMA).close()  # the schema is created only where missing


def test_connect_is_wal_autocommit_with_the_busy_timeout(tmp_path):
    path = tmp_path / "cache.sqlite"
    conn = sqlite.connect(path, 2.5, SCHEMA)
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert conn.execute("PRAGMA busy_timeout").fetchone() == (2500,)
    assert conn.execute("PRAGMA synchronous").fetchone() == (1,)  # NORMAL
    assert conn.isolation_level is None
    conn.execute("INSERT INTO replies VALUES ('m', 'k', 'v', 1.0)")
    other = sqlite3.connect(path)
    assert other.execute("SELECT COUNT(*) FROM replies").fetchone() == (1,)  # written without a commit()
    other.close()
    conn.close()


def test_connect_is_tied_to_its_thread_unless_thread_safe(tmp_path):
    def count_in_a_thread(conn) -> object:
        out = []
        worker = threading.Thread(target=lambda: out.append(_try(conn)))
        worker.start()
        worker.join()
        return out[0]

    def _try(conn):
        try:
            return conn.execute("SELECT COUNT(*) FROM replies").fetchone()[0]
        except sqlite3.ProgrammingError as e:
            return e

    assert isinstance(
        count_in_a_thread(sqlite.connect(tmp_path / "a.sqlite", 1.0, SCHEMA)), sqlite3.ProgrammingError
    )
    assert count_in_a_thread(sqlite.connect(tmp_path / "b.sqlite", 1.0, SCHEMA, thread_safe=True)) == 0


def test_connect_waits_for_a_lock_another_connection_holds(tmp_path):
    """Two processes creating one cache: the second waits for the first instead of failing."""
    path = tmp_path / "cache.sqlite"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE other (x)")
    holder.execute("BEGIN EXCLUSIVE")
    release = threading.Timer(0.3, lambda: holder.execute("COMMIT"))
    release.start()
    t0 = time.monotonic()
    conn = sqlite.connect(path, 10.0, SCHEMA)
    release.join()
    assert time.monotonic() - t0 >= 0.25
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    conn.close()
    holder.close()


def test_connect_gives_up_on_a_lock_held_past_the_timeout(tmp_path):
    path = tmp_path / "cache.sqlite"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE other (x)")
    holder.execute("BEGIN EXCLUSIVE")
    t0 = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        sqlite.connect(path, 0.2, SCHEMA)
    assert time.monotonic() - t0 < 5
    holder.close()


def test_connect_raises_a_broken_schema(tmp_path):
    with pytest.raises(sqlite3.OperationalError, match="syntax error"):
        sqlite.connect(tmp_path / "cache.sqlite", 1.0, "CREATE TABLE (")


def test_a_transaction_commits_or_rolls_back_whole(cache):
    with sqlite.transaction(cache) as conn:
        assert conn is cache and cache.in_transaction
        cache.execute("DELETE FROM replies WHERE key = 'a'")
    assert not cache.in_transaction and "a" not in [k for (k,) in cache.execute("SELECT key FROM replies")]
    with pytest.raises(KeyError), sqlite.transaction(cache):
        cache.execute("DELETE FROM replies")
        raise KeyError("halfway")
    assert not cache.in_transaction and len(models_left(cache)) == 4  # nothing of it stayed


def test_a_write_transaction_takes_the_lock_up_front_and_a_read_one_does_not(tmp_path, cache):
    other = sqlite.connect(tmp_path / "llm.sqlite", 0.1, SCHEMA)
    with sqlite.transaction(cache):
        with pytest.raises(sqlite3.OperationalError, match="locked"), sqlite.transaction(other):
            pass  # BEGIN IMMEDIATE waits for the write lock (0.1 s here), then fails
        assert not other.in_transaction
        with sqlite.transaction(other, "BEGIN") as conn:  # a reader beside the writer
            assert len(conn.execute("SELECT * FROM replies").fetchall()) == 5
    other.close()


def test_truncate_wal_empties_it_and_waits_for_a_reader(tmp_path, cache):
    wal = tmp_path / "llm.sqlite-wal"
    reader = sqlite3.connect(tmp_path / "llm.sqlite", isolation_level=None, check_same_thread=False)
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM replies").fetchone()  # holds its snapshot of the WAL
    cache.execute("DELETE FROM replies")
    with pytest.raises(TimeoutError, match=r"llm.sqlite: could not truncate the WAL within 0.2s"):
        sqlite.truncate_wal(cache, 0.2)
    release = threading.Timer(0.3, lambda: reader.execute("COMMIT"))
    release.start()
    sqlite.truncate_wal(cache, 10.0)
    release.join()
    assert wal.stat().st_size == 0
    reader.close()


def test_tables_of_lists_the_tables(tmp_path, cache):
    cache.execute("CREATE TABLE embeddings (model TEXT)")
    assert sqlite.tables_of(tmp_path / "llm.sqlite") == {"replies", "embeddings"}


def test_tables_of_neither_creates_nor_changes_a_file(tmp_path):
    missing = tmp_path / "missing.sqlite"
    with pytest.raises(sqlite3.OperationalError):
        sqlite.tables_of(missing)
    assert not missing.exists()
    path = tmp_path / "plain.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    assert sqlite.tables_of(path) == {"t"}
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.sqlite"]  # no journal or WAL left behind


def test_summarize_counts_entries_bytes_and_ages_per_model(cache):
    assert sqlite.summarize(cache, "replies", "body") == {
        "Qwen3-4B": {"entries": 1, "bytes": 2, "oldest": 50.0, "newest": 50.0},
        "qwen3-32b": {"entries": 2, "bytes": 6, "oldest": 100.0, "newest": 300.0},
        "qwen3-4b": {"entries": 1, "bytes": 1, "oldest": 200.0, "newest": 200.0},
        "smollm2-135m": {"entries": 1, "bytes": 0, "oldest": 400.0, "newest": 400.0},
    }
    assert list(sqlite.summarize(cache, "replies", "body")) == [
        "Qwen3-4B",
        "qwen3-32b",
        "qwen3-4b",
        "smollm2-135m",
    ]


def test_summarize_of_an_empty_table_is_empty(tmp_path):
    conn = sqlite.connect(tmp_path / "empty.sqlite", 1.0, SCHEMA)
    assert sqlite.summarize(conn, "replies", "body") == {}
    conn.close()


def test_prune_needs_an_age_or_a_model(cache):
    with pytest.raises(ValueError, match="^prune needs an age or a model$"):
        sqlite.prune(cache, "replies", None, None, apply=True)
    assert len(models_left(cache)) == len(ROWS)


def test_prune_without_apply_counts_and_deletes_nothing(cache):
    assert sqlite.prune(cache, "replies", 250.0, None, apply=False) == {
        "qwen3-32b": 1,
        "qwen3-4b": 1,
        "Qwen3-4B": 1,
    }
    assert len(models_left(cache)) == len(ROWS)


def test_prune_with_apply_deletes_what_it_counted_and_compacts(tmp_path, cache):
    wal = tmp_path / "llm.sqlite-wal"
    assert wal.stat().st_size > 0
    assert sqlite.prune(cache, "replies", 250.0, None, apply=True) == {
        "qwen3-32b": 1,
        "qwen3-4b": 1,
        "Qwen3-4B": 1,
    }
    assert models_left(cache) == ["qwen3-32b", "smollm2-135m"]  # keys b and e: written at 300 and 400
    assert wal.stat().st_size == 0  # checkpointed into the main file
    assert cache.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_prune_by_model_is_a_case_sensitive_glob(cache):
    assert sqlite.prune(cache, "replies", None, "qwen3-*", apply=False) == {"qwen3-32b": 2, "qwen3-4b": 1}
    assert sqlite.prune(cache, "replies", None, "qwen3-?b", apply=False) == {"qwen3-4b": 1}
    assert sqlite.prune(cache, "replies", None, "smollm2-135m", apply=True) == {"smollm2-135m": 1}
    assert "smollm2-135m" not in models_left(cache)


def test_prune_with_age_and_model_deletes_only_entries_matching_both(cache):
    assert sqlite.prune(cache, "replies", 250.0, "qwen3-*", apply=True) == {"qwen3-32b": 1, "qwen3-4b": 1}
    assert models_left(cache) == ["qwen3-32b", "Qwen3-4B", "smollm2-135m"]


def test_prune_matching_nothing_returns_no_counts(cache):
    assert sqlite.prune(cache, "replies", 10.0, None, apply=True) == {}
    assert sqlite.prune(cache, "replies", None, "gpt-*", apply=True) == {}
    assert len(models_left(cache)) == len(ROWS)
