"""The storage contract (lazymem/agent/store.py): `agent.store` names the store, and a wrong name or a
missing DSN fails with the key to set."""

from __future__ import annotations

import pytest

from lazymem.agent.store import open_store


def test_open_store_names_its_kinds(tmp_path, pg_dsn):
    assert type(open_store({"kind": "sqlite"}, tmp_path)).__name__ == "SQLiteStore"
    pg = open_store({"kind": "postgres", "dsn": pg_dsn}, tmp_path)
    assert pg.derived_in_store
    pg.close()
    with pytest.raises(ValueError, match="needs agent.store.dsn"):
        open_store({"kind": "postgres", "dsn": None}, tmp_path)
    with pytest.raises(ValueError, match="expected sqlite or postgres"):
        open_store({"kind": "mongo"}, tmp_path)
