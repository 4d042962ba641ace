"""The statements both stores run alike (lazymem/agent/store_sql.py), run on each dialect: SQLite in memory,
and a throwaway PostgreSQL database. The stores' own tests run them through the stores."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

from lazymem.agent import store_sql
from lazymem.agent.schema import POSTGRES, SQLITE, VERSION
from lazymem.agent.store import Claim


@pytest.fixture(params=["sqlite", "postgres"])
def db(request):
    """(a connection with the schema, its dialect); on PostgreSQL the connection is one transaction."""
    if request.param == "sqlite":
        conn, dialect = sqlite3.connect(":memory:", isolation_level=None), SQLITE
    else:
        conn, dialect = psycopg.connect(request.getfixturevalue("pg_dsn")), POSTGRES
    store_sql.migrate(conn, dialect, "the test's database")
    yield conn, dialect
    conn.close()


def _add(conn, dialect, tenant: str, user: str, *added: float) -> list[int]:
    """Messages of `user` added at the given unix times, the user's generation and pending rows; their ids."""
    p = dialect.mark
    first = store_sql.reserve_ids(conn, dialect, tenant, len(added))
    for n, when in enumerate(added):
        conn.execute(
            "INSERT INTO messages (tenant, user_id, id, session_id, time, role, text, added, source) "
            f"VALUES ({p}, {p}, {p}, 's', 't', 'user', {p}, {p}, {p})",
            (tenant, user, first + n, f"text {first + n}", when, f"key-{tenant}-{first + n}"),
        )
    conn.execute(
        f"INSERT INTO generations VALUES ({p}, {p}, 1) ON CONFLICT (tenant, user_id) DO NOTHING",
        (tenant, user),
    )
    conn.execute(
        f"INSERT INTO pending (tenant, user_id, mark) VALUES ({p}, {p}, 1) ON CONFLICT (tenant, user_id) "
        "DO NOTHING",
        (tenant, user),
    )
    return list(range(first, first + len(added)))


def _rows(conn, sql: str, *args) -> list[tuple]:
    return [tuple(row) for row in conn.execute(sql, args).fetchall()]


def test_migrate_records_the_version_once_and_refuses_a_newer_one(db):
    conn, dialect = db
    assert _rows(conn, "SELECT version FROM schema_version") == [(VERSION,)]
    store_sql.migrate(conn, dialect, "here")  # at the version: nothing to do
    assert _rows(conn, "SELECT version FROM schema_version") == [(VERSION,)]
    conn.execute("UPDATE schema_version SET version = version + 1")
    with pytest.raises(RuntimeError, match=f"^here has lazymem schema version {VERSION + 1}"):
        store_sql.migrate(conn, dialect, "here")


def test_each_tenant_reserves_ids_from_its_own_counter(db):
    conn, dialect = db
    assert store_sql.reserve_ids(conn, dialect, "a", 3) == 1
    assert store_sql.reserve_ids(conn, dialect, "b", 1) == 1
    assert store_sql.reserve_ids(conn, dialect, "a", 2) == 4


def test_finish_keeps_a_user_added_to_since_the_claim_pending(db):
    conn, dialect = db
    p = dialect.mark
    _add(conn, dialect, "t", "u", 1.0)
    conn.execute("UPDATE pending SET claimed_until = 99, claimed_at = 50, since = 40")
    store_sql.finish(conn, dialect, Claim("t", "u", 1))
    assert _rows(conn, "SELECT COUNT(*) FROM pending") == [(0,)]
    _add(conn, dialect, "t", "v", 1.0)
    conn.execute("UPDATE pending SET claimed_until = 99, claimed_at = 50, since = 40, mark = 2")
    store_sql.finish(conn, dialect, Claim("t", "v", 1))  # an add moved the mark since the claim
    assert _rows(conn, f"SELECT claimed_until, since, claimed_at FROM pending WHERE user_id = {p}", "v") == [
        (0, 50, None)
    ]


def test_users_pages_through_every_user_in_order(db):
    conn, dialect = db
    for tenant, user in [("b", "x"), ("a", "z"), ("a", "y")]:
        _add(conn, dialect, tenant, user, 1.0)
    assert store_sql.users(conn, dialect, None, 2) == [("a", "y"), ("a", "z")]
    assert store_sql.users(conn, dialect, ("a", "z"), 2) == [("b", "x")]
    assert store_sql.users(conn, dialect, ("b", "x"), 2) == []


def test_a_purge_deletes_a_users_old_messages_oldest_first_and_settles_the_user(db):
    conn, dialect = db
    _add(conn, dialect, "t", "u", 5.0, 1.0, 9.0)
    _add(conn, dialect, "t", "w", 2.0)
    _add(conn, dialect, "other", "v", 1.0)
    assert store_sql.users_before(conn, dialect, "t", 6.0) == ["u", "w"]
    gone = store_sql.delete_before(conn, dialect, "t", "u", 6.0)
    assert [(m.id, m.added, m.source) for m in gone] == [(1, 5.0, "key-t-1"), (2, 1.0, "key-t-2")]
    assert store_sql.settle(conn, dialect, "t", "u") is True  # message 3 is left
    assert [m.id for m in store_sql.delete_before(conn, dialect, "t", "w", 6.0)] == [4]
    assert store_sql.settle(conn, dialect, "t", "w") is False  # none left: no row names the user
    assert _rows(conn, "SELECT user_id FROM generations ORDER BY user_id") == [("u",), ("v",)]
    assert _rows(conn, "SELECT user_id FROM pending ORDER BY user_id") == [("u",), ("v",)]


def test_delete_user_takes_the_users_messages_keys_and_tombstones_only(db):
    conn, dialect = db
    p = dialect.mark
    _add(conn, dialect, "t", "u", 1.0, 2.0)
    _add(conn, dialect, "t", "v", 1.0)
    for user in ("u", "v"):
        conn.execute(
            f"INSERT INTO idempotency VALUES ('t', {p}, 'k', 'd', {p}, 0)",
            (user, "[]" if dialect is SQLITE else []),
        )
        conn.execute(f"INSERT INTO forgotten VALUES ('t', {p}, 'digest', 0)", (user,))
    assert store_sql.delete_user(conn, dialect, "t", "u") == 2
    for table in ("messages", "idempotency", "forgotten"):
        assert _rows(conn, f"SELECT DISTINCT user_id FROM {table}") == [("v",)]
