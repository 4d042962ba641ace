"""`lazymem serve` under uvicorn on a free port, driven over real HTTP (httpx), retrieval only (method=rag):
tenants, keys, bad bodies, limits, forget, retention, concurrency, and a canary that must leave no trace."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys

import httpx
import pytest

from agent_helpers import ROOT, Service, files_containing

KEYS = {"a": "key-a-0123456789", "b": "key-b-0123456789", "short": "key-short-0123456789"}


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("service")
    keys_file = tmp / "keys.yaml"
    keys_file.write_text(
        f"a: {{keys: [{KEYS['a']}]}}\nb: {{keys: [{KEYS['b']}]}}\n"
        f"short: {{keys: [{KEYS['short']}], retention_days: 0.00003}}\n"  # about 2.6 s
    )
    svc = Service(
        tmp,
        "method=rag",
        f"serve.keys_file={keys_file}",
        "serve.purge_every_s=0.5",
        "serve.max_body_bytes=20000",  # holds a message of max_text_chars at 4 bytes a character
        "agent.limits.max_text_chars=4000",
        "agent.limits.max_question_chars=4000",
        "agent.limits.max_messages_per_add=50",
    )
    svc.tmp = tmp
    yield svc
    svc.stop()


def client(svc, tenant: str | None = "a", key: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key or KEYS[tenant]}"} if tenant or key else {}
    return httpx.Client(base_url=svc.url, headers=headers, timeout=120)


def msgs(*texts: str) -> dict:
    return {"messages": [{"role": "user", "text": t} for t in texts]}


def test_add_query_export_forget_round_trip(service):
    c = client(service)
    r = c.post("/v1/users/ann/messages", json=msgs("I adopted a dog named Biscuit.", "I work as a nurse."))
    assert r.status_code == 201, r.text
    ids = r.json()["ids"]
    assert len(ids) == 2 and ids[0] < ids[1]
    more = {"messages": [{"role": "assistant", "text": "Noted.", "time": "2025-01-02", "session_id": "s2"}]}
    assert c.post("/v1/users/ann/messages", json=more).status_code == 201

    found = c.post("/v1/users/ann/query", json={"question": "What is my dog called?"}).json()
    assert "Biscuit" in found["text"] and found["style"] == "raw" and found["tokens"] > 0
    assert {m["id"] for m in found["messages"]} >= {ids[0]}
    assert {"index", "retrieval", "total"} <= set(found["timings"])

    exported = c.get("/v1/users/ann/export").json()["messages"]
    assert [m["text"] for m in exported] == ["I adopted a dog named Biscuit.", "I work as a nurse.", "Noted."]
    assert exported[2]["session_id"] == "s2" and exported[2]["time"] == "2025-01-02"

    assert c.post("/v1/users/ann/forget", json={"message_ids": [ids[0]]}).json() == {"deleted": 1}
    left = [m["id"] for m in c.get("/v1/users/ann/export").json()["messages"]]
    assert ids[0] not in left and len(left) == 2
    assert c.delete("/v1/users/ann").json() == {"deleted": 2}
    assert c.get("/v1/users/ann/export").status_code == 404
    assert c.post("/v1/users/ann/query", json={"question": "dog?"}).status_code == 404


def test_a_key_reaches_only_its_own_tenant(service):
    a, b = client(service, "a"), client(service, "b")
    secrets = msgs("secret of tenant a", "another secret of tenant a")
    assert a.post("/v1/users/shared-name/messages", json=secrets).status_code == 201
    assert b.get("/v1/users/shared-name/export").status_code == 404
    assert b.post("/v1/users/shared-name/query", json={"question": "secret?"}).status_code == 404
    assert b.delete("/v1/users/shared-name").status_code == 404
    assert b.post("/v1/users/shared-name/messages", json=msgs("tenant b here")).status_code == 201
    assert [m["text"] for m in a.get("/v1/users/shared-name/export").json()["messages"]] == [
        "secret of tenant a",
        "another secret of tenant a",
    ]
    b_messages = b.get("/v1/users/shared-name/export").json()["messages"]
    assert [m["text"] for m in b_messages] == ["tenant b here"]
    # a message id of tenant a cannot be forgotten through tenant b's user of the same name. Ids count per
    # tenant, so one of a's may equal b's own (which b may forget): take one that does not.
    a_ids = [m["id"] for m in a.get("/v1/users/shared-name/export").json()["messages"]]
    a_id = next(i for i in a_ids if i != b_messages[0]["id"])
    assert b.post("/v1/users/shared-name/forget", json={"message_ids": [a_id]}).status_code == 404
    assert len(a.get("/v1/users/shared-name/export").json()["messages"]) == 2


@pytest.mark.parametrize("key", [None, "wrong-key", KEYS["a"] + "x"])
def test_missing_or_unknown_keys_are_401(service, key):
    c = client(service, None, key)
    for r in (
        c.post("/v1/users/u/messages", json=msgs("x")),
        c.get("/v1/users/u/export"),
        c.post("/v1/users/u/query", json={"question": "x"}),
    ):
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"


def test_bad_bodies_are_4xx_and_write_nothing(service):
    c = client(service)
    post = c.post
    bad_json = post(
        "/v1/users/v/messages", content=b'{"messages": [', headers={"content-type": "application/json"}
    )
    assert bad_json.status_code == 400 and bad_json.json() == {
        "code": "bad_input",
        "detail": "the body is not valid JSON",
    }
    missing = post("/v1/users/v/messages", json={"messages": [{"role": "user"}]})
    assert missing.status_code == 400 and missing.json()["detail"] == "body.messages[0].text: Field required"
    assert post("/v1/users/v/messages", json={"msgs": []}).status_code == 400
    extra = post("/v1/users/v/messages", json={"messages": [{"role": "u", "text": "x", "extra": 1}]})
    assert extra.status_code == 400 and "body.messages[0].extra" in extra.json()["detail"]
    # a batch with one bad message stores none of it
    mixed = {"messages": [{"role": "user", "text": "fine"}, {"role": "user", "text": "   "}]}
    r = post("/v1/users/v/messages", json=mixed)
    assert r.status_code == 400 and "message 1: text" in r.json()["detail"]
    assert post("/v1/users/v/messages", json={"messages": []}).status_code == 400
    too_many = post("/v1/users/v/messages", json=msgs(*["m"] * 51))
    assert too_many.status_code == 400 and "at most 50" in too_many.json()["detail"]
    assert post("/v1/users/v/query", json={"question": ""}).status_code in (400, 404)
    assert post("/v1/users/v/forget", json={"message_ids": ["one"]}).status_code == 400
    assert c.get("/v1/users/v/export").status_code == 404  # nothing was written


def test_oversized_bodies_are_413_with_or_without_a_length(service):
    c = client(service)
    big = json.dumps(msgs("x" * 30000)).encode()
    r = c.post("/v1/users/w/messages", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and "serve.max_body_bytes" in r.json()["detail"]
    assert r.json()["code"] == "too_large"

    def chunks():
        for i in range(0, len(big), 4096):
            yield big[i : i + 4096]

    r = c.post("/v1/users/w/messages", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert c.get("/v1/users/w/export").status_code == 404


def test_forget_of_unknown_ids_deletes_nothing(service):
    c = client(service)
    ids = c.post("/v1/users/x/messages", json=msgs("one", "two")).json()["ids"]
    r = c.post("/v1/users/x/forget", json={"message_ids": [ids[0], 999999]})
    assert r.status_code == 404 and r.json()["code"] == "unknown_messages" and "999999" in r.json()["detail"]
    assert len(c.get("/v1/users/x/export").json()["messages"]) == 2


def test_an_export_with_vectors_imports_into_another_user_and_a_bad_vector_is_a_400(service):
    """Over HTTP: `?vectors=true` carries the vectors the background indexer stored, and the NDJSON import
    accepts them; a vector of the wrong width stops the import at its line, with nothing of it stored."""
    c = client(service)
    assert (
        c.post("/v1/users/vec-src/messages", json=msgs("I play the cello.", "My cat is Tom.")).status_code
        == 201
    )
    for _ in range(240):
        lines = c.get("/v1/users/vec-src/export", params={"vectors": "true"}).json()["messages"]
        if all("vectors" in m for m in lines):
            break
        asyncio.run(asyncio.sleep(0.25))
    else:
        pytest.fail("the background indexer never embedded the messages")
    assert all("vectors" not in m for m in c.get("/v1/users/vec-src/export").json()["messages"])
    (model,) = lines[0]["vectors"]
    (vector,) = lines[0]["vectors"][model].values()
    assert len(base64.b64decode(vector)) == 384 * 4

    ndjson = {"Content-Type": "application/x-ndjson"}
    keep = ("role", "text", "time", "session_id", "vectors")
    body = [json.dumps({k: m[k] for k in keep}) for m in lines]
    damaged = json.loads(body[1])
    damaged["vectors"] = {
        model: dict.fromkeys(damaged["vectors"][model], base64.b64encode(b"\0" * 16).decode())
    }
    r = c.post("/v1/users/vec-bad/import", content="\n".join([body[0], json.dumps(damaged)]), headers=ndjson)
    assert r.status_code == 400 and r.json()["stored"] == 0
    assert (
        "line 2: vectors" in r.json()["detail"]
        and "4 values, but the encoder makes 384" in r.json()["detail"]
    )
    assert c.get("/v1/users/vec-bad/export").status_code == 404

    streamed = c.get("/v1/users/vec-src/export", params={"vectors": "true", "format": "ndjson"})
    assert streamed.headers["content-type"].startswith("application/x-ndjson")
    assert [json.loads(line) for line in streamed.text.splitlines()] == [
        {"user_id": "vec-src", **m} for m in lines
    ]
    r = c.post("/v1/users/vec-dst/import", content=streamed.content, headers=ndjson)  # as exported
    assert r.status_code == 201 and r.json() == {"stored": 2, "skipped": 0, "forgotten": 0}
    assert c.get("/v1/users/nobody/export", params={"format": "ndjson"}).status_code == 404
    assert (
        "Tom" in c.post("/v1/users/vec-dst/query", json={"question": "What is my cat called?"}).json()["text"]
    )


def test_retention_purges_a_tenants_old_messages(service):
    short, a = client(service, "short"), client(service, "a")
    assert short.post("/v1/users/old/messages", json=msgs("ephemeral")).status_code == 201
    assert a.post("/v1/users/kept/messages", json=msgs("durable")).status_code == 201
    assert short.post("/v1/users/old/query", json={"question": "ephemeral?"}).status_code == 200
    for _ in range(60):
        if short.get("/v1/users/old/export").status_code == 404:
            break
        asyncio.run(asyncio.sleep(0.25))
    else:
        pytest.fail("the short-retention tenant's message was never purged")
    assert a.get("/v1/users/kept/export").status_code == 200  # other tenants keep theirs


def test_concurrent_clients_lose_no_writes(service):
    users, batches = 32, 4

    async def one(u: int, http: httpx.AsyncClient) -> list[int]:
        codes = []
        for k in range(batches):
            r = await http.post(f"/v1/users/conc-{u}/messages", json=msgs(f"user {u} batch {k} a", f"b {k}"))
            codes.append(r.status_code)
            r = await http.post(f"/v1/users/conc-{u}/query", json={"question": f"batch {k}?"})
            codes.append(r.status_code)
        return codes

    async def run():
        headers = {"Authorization": f"Bearer {KEYS['b']}"}
        async with httpx.AsyncClient(base_url=service.url, headers=headers, timeout=300) as http:
            return await asyncio.gather(*(one(u, http) for u in range(users)))

    codes = [c for per_user in asyncio.run(run()) for c in per_user]
    assert set(codes) == {201, 200}, sorted(set(codes))
    b = client(service, "b")
    for u in range(users):
        texts = [m["text"] for m in b.get(f"/v1/users/conc-{u}/export").json()["messages"]]
        assert texts == [t for k in range(batches) for t in (f"user {u} batch {k} a", f"b {k}")]
    assert "database is locked" not in service.log.read_text()


def test_a_forgotten_canary_is_in_no_file_and_no_log(service):
    canary = "CANARY-7f3a9c1e-dont-keep-me"
    c = client(service)
    c.post("/v1/users/canary/messages", json=msgs("plain message", f"my passport number is {canary}"))
    found = c.post("/v1/users/canary/query", json={"question": "What is my passport number?"}).json()
    assert canary in found["text"]
    dirs = (service.tmp / "data", service.tmp / "cache")
    assert files_containing(canary.encode(), *dirs)  # it was stored somewhere: the check below can fail
    assert c.delete("/v1/users/canary").json() == {"deleted": 2}
    assert files_containing(canary.encode(), *dirs) == []
    assert canary not in service.log.read_text() and KEYS["a"] not in service.log.read_text()


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("agent.max_open_users=-1", "agent.max_open_users: expected an integer >= 1, got -1"),
        ("serve.max_body_bytes=100", "serve.max_body_bytes: "),
        ("mcp.user=' '", "mcp.user: "),
        ("serve.bogus=1", "Could not override 'serve.bogus'. To append to your config use +serve.bogus=1"),
    ],
)
def test_a_bad_setting_refuses_start_up_in_one_line_naming_its_key(tmp_path, override, line):
    done = subprocess.run(
        [sys.executable, "-m", "lazymem.run", "serve", "method=rag", override, f"agent.dir={tmp_path}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "LAZYMEM_API_KEYS": "key-0123456789=t"},
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith(f"lazymem serve: {line}")
