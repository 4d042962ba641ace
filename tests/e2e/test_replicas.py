"""Two `lazymem serve` replicas on one real PostgreSQL (agent/store=postgres): what one writes the
other reads, a forget through one leaves no row and no file on either, and kill -9 of a replica during
adds loses no acknowledged write."""

from __future__ import annotations

import base64
import threading
import time

import httpx
import psycopg
import pytest

from lazymem.agent.vector_blocks import decode

from agent_helpers import Service, cli, files_containing

pytestmark = pytest.mark.slow

KEY = "replica-key-0123456789"


@pytest.fixture
def replicas(tmp_path, pg_dsn):
    keys = tmp_path / "keys.yaml"
    keys.write_text(f"acme: {{keys: [{KEY}]}}\n")  # no retention: maintenance runs all the same
    common = (
        "method=rag",
        f"serve.keys_file={keys}",
        "agent/store=postgres",
        f"agent.store.dsn={pg_dsn}",
        "serve.maintain_every_s=0.5",
        "serve.refresh_every_s=0.5",
        "agent.index_lease_s=5",  # a killed replica's indexing claim passes to the other within seconds
    )
    started = []
    try:
        for name in ("r1", "r2"):
            (tmp_path / name).mkdir()
            started.append(Service(tmp_path / name, *common))
        yield started
    finally:
        for svc in started:
            svc.stop()


def client(svc: Service) -> httpx.Client:
    return httpx.Client(base_url=svc.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=120)


def msgs(*texts: str) -> dict:
    return {"messages": [{"role": "user", "text": t} for t in texts]}


def test_a_write_through_one_replica_is_read_through_the_other(replicas):
    one, two = (client(r) for r in replicas)
    ids = one.post(
        "/v1/users/ann/messages", json=msgs("My dog is called Biscuit.", "I live in Lyon.")
    ).json()["ids"]
    found = two.post("/v1/users/ann/query", json={"question": "What is my dog called?"}).json()
    assert "Biscuit" in found["text"] and ids[0] in [m["id"] for m in found["messages"]]
    more = two.post("/v1/users/ann/messages", json=msgs("I started rowing.")).json()["ids"]
    assert more == [ids[-1] + 1]  # one id counter per tenant, shared by the replicas
    assert [m["id"] for m in one.get("/v1/users/ann/export").json()["messages"]] == ids + more


def _blocks_holding(dsn: str, needle: bytes) -> list[str]:
    """The kinds of the user's `blocks` rows whose data holds `needle` (read through SQL: decompressed)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT kind FROM blocks WHERE user_id = 'cat' AND position(%s::bytea IN data) > 0 ORDER BY kind",
            (needle,),
        ).fetchall()
    return [kind for (kind,) in rows]


def _until_maintained(postgres, *needles: bytes) -> None:
    deadline = time.monotonic() + 60  # the next maintenance step rewrites the tables
    while any(postgres.files_containing(n) for n in needles) and time.monotonic() < deadline:
        time.sleep(0.5)
    for needle in needles:
        assert postgres.files_containing(needle) == [], needle


def test_a_forget_through_one_replica_leaves_no_trace_on_either(replicas, postgres, pg_dsn, tmp_path):
    """The canary message forgotten alone, then the whole user: after each, and the maintenance step, no
    row and no table file holds its text, its vector's bytes, or its BM25 terms (the "bm25" blocks). After
    the forget, every write path runs again with what it carried before (the add retried with its key, the
    NDJSON import of an export taken before the forget through the other replica, the same through
    `lazymem import`), and none brings the canary back."""
    token = "zx5d1e9fq"  # one BM25 term, as the tokenizer keeps it
    canary = f"CANARY-{token}-forget-me"
    one, two = (client(r) for r in replicas)
    add = {
        "json": msgs("plain message", f"my locker code is {canary}"),
        "headers": {"Idempotency-Key": "a-1"},
    }
    ids = one.post("/v1/users/cat/messages", **add).json()["ids"]
    for c in (one, two):  # both replicas build their indexes and derived blocks from it
        assert (
            canary
            in c.post("/v1/users/cat/query", json={"question": "What is my locker code?"}).json()["text"]
        )
    exported = one.get("/v1/users/cat/export", params={"vectors": "true"}).json()["messages"]
    (vectors,) = [m["vectors"] for m in exported if canary in m["text"]]
    (vector,) = [base64.b64decode(v) for by_key in vectors.values() for v in by_key.values()]
    assert _blocks_holding(pg_dsn, vector) == ["vectors"]
    assert _blocks_holding(pg_dsn, token.encode()) == ["bm25"]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    # TOAST stores a block in chunks of about 2 kB: one of the vector's halves is whole in one of them
    halves = (vector[: len(vector) // 2], vector[len(vector) // 2 :])
    assert any(postgres.files_containing(half) for half in halves)  # the search does see the table files

    before = one.get("/v1/users/cat/export", params={"format": "ndjson", "vectors": "true"}).text
    assert canary in before

    assert two.post("/v1/users/cat/forget", json={"message_ids": [ids[1]]}).json() == {"deleted": 1}
    _write_paths_bring_nothing_back(one, two, add, ids, before, canary, pg_dsn, tmp_path)
    for c in (one, two):  # both rebuild (and store again) what the remaining message needs
        assert "plain" in c.post("/v1/users/cat/query", json={"question": "plain?"}).json()["text"]
    assert _blocks_holding(pg_dsn, vector) == [] and _blocks_holding(pg_dsn, token.encode()) == []
    with psycopg.connect(pg_dsn) as conn:  # the other message's vector and terms stay, in blocks
        kinds = conn.execute(
            "SELECT DISTINCT kind FROM blocks WHERE user_id = 'cat' ORDER BY kind"
        ).fetchall()
    assert kinds == [("bm25",), ("vectors",)]
    assert files_containing(canary.encode(), tmp_path / "r1", tmp_path / "r2") == []
    _until_maintained(postgres, canary.encode(), *halves, token.encode())

    assert one.delete("/v1/users/cat").json() == {"deleted": 1}
    with psycopg.connect(pg_dsn) as conn:
        for table in ("messages", "derived", "blocks", "generations"):
            rows = conn.execute(f"SELECT COUNT(*) FROM {table} WHERE user_id = 'cat'").fetchone()[0]
            assert rows == 0, table
    assert two.post("/v1/users/cat/query", json={"question": "locker code?"}).status_code == 404
    assert files_containing(b"plain message", tmp_path / "r1", tmp_path / "r2") == []
    _until_maintained(postgres, b"plain message")


def _write_paths_bring_nothing_back(one, two, add, ids, before, canary, pg_dsn, tmp_path) -> None:
    assert one.post("/v1/users/cat/messages", **add).json()["ids"] == ids  # the retry replays its ids
    imported = two.post("/v1/users/cat/import", content=before)  # the export taken before the forget
    assert imported.json() == {"stored": 0, "skipped": 1, "forgotten": 1}, imported.text
    export_file = tmp_path / "before.jsonl"
    export_file.write_text(before)
    db = (f"agent.dir={tmp_path / 'cli'}", "agent/store=postgres", f"agent.store.dsn={pg_dsn}")
    done = cli("import", str(export_file), "--tenant", "acme", *db, tmp=tmp_path)
    assert done.returncode == 0 and done.stderr.splitlines()[-1].endswith(
        "(0 stored, 1 already stored, 1 forgotten)"
    ), done.stderr
    for c in (one, two):
        assert canary not in c.get("/v1/users/cat/export").text
        assert canary not in c.post("/v1/users/cat/query", json={"question": "locker code?"}).text
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT COUNT(*) FROM messages WHERE user_id = 'cat'").fetchone() == (1,)


def test_kill_9_of_a_replica_during_adds_loses_no_acknowledged_write(replicas, pg_dsn):
    doomed, survivor = replicas
    acknowledged: list[int] = []

    def add_until_killed():
        with client(doomed) as c:
            for n in range(10_000):
                try:
                    r = c.post("/v1/users/bulk/messages", json=msgs(*(f"m{n}-{k}" for k in range(20))))
                except httpx.TransportError:
                    return
                if r.status_code != 201:
                    return
                acknowledged.extend(r.json()["ids"])

    writer = threading.Thread(target=add_until_killed)
    writer.start()
    deadline = time.monotonic() + 60
    while len(acknowledged) < 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    doomed.kill()
    writer.join(60)
    assert len(acknowledged) >= 200
    stored = [m["id"] for m in client(survivor).get("/v1/users/bulk/export").json()["messages"]]
    assert set(acknowledged) <= set(stored)
    assert len(stored) == len(set(stored)) and len(stored) % 20 == 0  # batches whole or absent

    def indexed() -> tuple[int, int]:
        with psycopg.connect(pg_dsn) as conn:
            blocks = conn.execute(
                "SELECT data FROM blocks WHERE user_id = 'bulk' AND kind = 'vectors'"
            ).fetchall()
            vectors = len({key for (data,) in blocks for key in decode(bytes(data))[0]})
            return vectors, conn.execute("SELECT COUNT(*) FROM pending").fetchone()[0]

    deadline = time.monotonic() + 300  # the survivor's indexer embeds what the killed one had not
    while indexed() != (len(stored), 0) and time.monotonic() < deadline:
        time.sleep(1)
    assert indexed() == (len(stored), 0)
