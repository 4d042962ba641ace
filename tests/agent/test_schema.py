"""The stores' one schema (lazymem/agent/schema.py): each step written once for both dialects, versions in
order, and the all-or-none check of a deletion by ids."""

from __future__ import annotations

import sqlite3

import pytest

from lazymem.agent.errors import UnknownMessages
from lazymem.agent.schema import (
    POSTGRES,
    SQLITE,
    STEPS,
    VERSION,
    blocks_table,
    check_known,
    steps_after,
)


def test_versions_grow_by_one_and_each_dialect_gets_its_own_words():
    assert [s.version for s in STEPS] == list(range(2, VERSION + 1)) and VERSION == 5
    lite, pg = steps_after(0, SQLITE, "here"), steps_after(0, POSTGRES, "here")
    assert not any("{" in s and "}" in s for s in lite + pg)  # every placeholder filled
    assert any("id         INTEGER NOT NULL" in s for s in lite)
    assert any("id         BIGINT NOT NULL" in s for s in pg)
    assert any("ids     BIGINT[] NOT NULL" in s for s in pg) and any(
        "ids     TEXT NOT NULL" in s for s in lite
    )
    assert any("CREATE SEQUENCE" in s for s in pg) and not any("CREATE SEQUENCE" in s for s in lite)
    assert any("CREATE TABLE counters" in s for s in lite) and not any("counters" in s for s in pg)
    assert steps_after(VERSION, SQLITE, "here") == []
    assert steps_after(3, POSTGRES, "here")[:2] == [
        blocks_table(POSTGRES),
        "ALTER TABLE blocks ALTER COLUMN data SET STORAGE EXTERNAL",  # vector blocks do not compress
    ]
    assert steps_after(3, SQLITE, "here")[0] == blocks_table(SQLITE)
    for dialect, random in ((SQLITE, "randomblob(16)"), (POSTGRES, "md5(random()")):
        five = steps_after(4, dialect, "here")  # tombstones, and a key for every message without one
        assert (
            "CREATE TABLE forgotten" in five[0] and "WHERE source IS NULL" in five[-1] and random in five[-1]
        )
    with pytest.raises(
        RuntimeError, match=f"^the file has lazymem schema version 6; this lazymem knows {VERSION}"
    ):
        steps_after(VERSION + 1, SQLITE, "the file")


def test_the_sqlite_statements_build_every_table_in_a_new_file():
    conn = sqlite3.connect(":memory:")
    for statement in steps_after(0, SQLITE, "memory"):
        conn.execute(statement)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == {
        *(
            "messages",
            "tenant_ids",
            "generations",
            "pending",
            "counters",
            "idempotency",
            "blocks",
            "forgotten",
        )
    }
    conn.execute(blocks_table(SQLITE, if_absent=True))  # a second time changes nothing
    with pytest.raises(sqlite3.OperationalError, match="already exists"):
        conn.execute(blocks_table(SQLITE))


def test_a_deletion_by_ids_is_all_or_none():
    check_known([3, 1, 3], [1, 2, 3])
    with pytest.raises(UnknownMessages) as caught:
        check_known([5, 1, 9, 5], iter([1, 2]))
    assert caught.value.ids == [5, 9]
