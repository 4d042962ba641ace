"""The PostgreSQL store's maintenance step (lazymem/agent/postgres_maintenance.py): after it, no table file
holds a forgotten text; and a step that cannot finish (no right to CHECKPOINT) fails loudly, says what to
grant, and leaves the deletions marked for the next one, instead of clearing the mark first."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import psycopg
import pytest

from lazymem.agent.errors import MaintenanceFailed
from lazymem.agent.postgres_store import PostgresStore
from lazymem.agent.store import NewMessage


def new(*texts: str) -> list[NewMessage]:
    return [NewMessage("user", t, "t0", "s") for t in texts]


@pytest.fixture
def store(pg_dsn):
    made = PostgresStore(pg_dsn, pool_size=2)
    yield made
    made.close()


def test_maintenance_leaves_no_forgotten_text_in_the_table_files(store, postgres, pg_dsn):
    canary = "canary-7f3a9c-in-the-table-files"
    store.add("t", "u", new(canary, "kept"))
    store.derived("t", "u", Path(tempfile.mkdtemp()), store.snapshot("t", "u").generation).llm_cache().put(
        "k", {"c": canary}
    )
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    assert postgres.files_containing(canary.encode())  # the search does see table files
    store.forget("t", "u", [1])
    with psycopg.connect(pg_dsn) as conn:
        assert not conn.execute("SELECT 1 FROM messages WHERE text LIKE %s", (f"%{canary}%",)).fetchall()
        assert conn.execute("SELECT COUNT(*) FROM derived").fetchone() == (0,)
    store.maintain()
    assert postgres.files_containing(canary.encode()) == []
    assert [m.text for m in store.snapshot("t", "u").messages] == ["kept"]


def test_maintenance_without_the_checkpoint_right_stays_pending_and_says_what_to_grant(postgres):
    """The service's role owns its tables but may not CHECKPOINT: the step fails, says what to grant, and
    keeps the deletions marked, so that it is done again (and not reported done) until it succeeds."""
    role, db = f"app_{uuid.uuid4().hex[:8]}", f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres.dsn(), autocommit=True) as admin:
        if admin.info.server_version < 150000:
            pytest.skip("pg_checkpoint is a role of PostgreSQL 15 and later")
        admin.execute(f"CREATE ROLE {role} LOGIN")
        admin.execute(f"CREATE DATABASE {db} OWNER {role}")
    dsn = f"postgresql://{role}@127.0.0.1:{postgres.port}/{db}"
    store = PostgresStore(dsn)
    added = store.add("t", "u", new("forget me", "keep me"))
    store.forget("t", "u", added.ids[:1])

    def pending() -> bool:
        with psycopg.connect(dsn) as conn:
            return conn.execute("SELECT pending FROM maintenance").fetchone()[0]

    for _ in range(2):  # the retry does it all again, and fails again
        with pytest.raises(MaintenanceFailed, match="pg_checkpoint"):
            store.maintain()
        assert pending()
    with psycopg.connect(postgres.dsn(), autocommit=True) as admin:
        admin.execute(f"GRANT pg_checkpoint TO {role}")
    store.maintain()
    assert not pending()
    store.close()
