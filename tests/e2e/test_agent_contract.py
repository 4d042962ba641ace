"""The agent memory's one input contract (docs/agent-contract.md), checked on the Python API and over HTTP
through their public surfaces only (the MCP tools: tests/agent/test_mcp_server.py): unknown fields are
refused, ids are integers and nothing else, forgetting everything is its own call, an empty forget changes
nothing, every error carries one code per kind, and an idempotency key stores a retried add once."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from lazymem.agent.errors import AgentError, BadInput, IdempotencyConflict, UnknownMessages, UnknownUser
from lazymem.agent.memory import Memory

from agent_helpers import Service

KEY = "key-contract-0123456789"
# Each value was once read as message id 10 (True: as id 1); every case runs in a new tenant of its own,
# whose ids start at 1, so a coerced value would name one of the user's own messages
COERCED = {"string": "10", "float": 10.0, "padded": " 10 ", "plus": "+10", "underscore": "1_0", "bool": True}


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("contract")
    keys = ",".join([f"{KEY}=t", *(f"{KEY}-{label}=t-{label}" for label in COERCED)])
    limits = (
        "serve.max_import_bytes=6000",
        "serve.max_body_bytes=4100",
        "agent.limits.max_text_chars=1000",
        "agent.limits.max_question_chars=1000",
        "agent.limits.max_messages_per_add=20",
    )
    svc = Service(tmp, "method=rag", *limits, env={"LAZYMEM_API_KEYS": keys})
    yield svc
    svc.stop()


@pytest.fixture(scope="module")
def memory(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("contract-py")
    with Memory.from_config(["method=rag", f"agent.dir={tmp / 'data'}", f"paths.cache={tmp / 'cache'}"]) as m:
        yield m


def http(svc, key: str = KEY) -> httpx.Client:
    return httpx.Client(base_url=svc.url, headers={"Authorization": f"Bearer {key}"}, timeout=120)


def notes(n: int, prefix: str = "note") -> list[dict]:
    return [{"role": "user", "text": f"{prefix} {i}"} for i in range(n)]


def stored_texts(c: httpx.Client, user: str) -> list[str]:
    return [m["text"] for m in c.get(f"/v1/users/{user}/export").json()["messages"]]


def fails(call, error: type[AgentError]) -> AgentError:
    with pytest.raises(error) as caught:
        call()
    return caught.value


# ---- unknown fields


def test_unknown_fields_are_refused_on_both_interfaces(service, memory):
    message = {"role": "user", "text": "hello", "mood": "happy"}
    err = fails(lambda: memory.add("uf", [message]), BadInput)
    assert "unknown fields ['mood']" in str(err) and err.code == "bad_input"
    with http(service) as c:
        for path, body in [
            ("/v1/users/uf/messages", {"messages": [message]}),
            ("/v1/users/uf/messages", {"messages": [{"role": "user", "text": "x"}], "dry_run": True}),
            ("/v1/users/uf/query", {"question": "x", "top_k": 3}),
            ("/v1/users/uf/forget", {"message_ids": [1], "dry_run": True}),
        ]:
            r = c.post(path, json=body)
            assert r.status_code == 400 and r.json()["code"] == "bad_input", (path, r.text)
        assert c.get("/v1/users/uf/export").json()["code"] == "unknown_user"  # nothing was stored


# ---- ids


@pytest.mark.parametrize("label", COERCED)
def test_ids_are_integers_and_nothing_else(service, memory, label):
    value, tenant = COERCED[label], f"t-{label}"
    assert memory.add("u", notes(12), tenant=tenant) == list(range(1, 13))
    fails(lambda: memory.forget("u", [value], tenant=tenant), BadInput)
    assert len(memory.export("u", tenant=tenant)) == 12
    with http(service, f"{KEY}-{label}") as c:
        added = c.post("/v1/users/u/messages", json={"messages": notes(12)})
        assert added.json()["ids"] == list(range(1, 13))
        r = c.post("/v1/users/u/forget", json={"message_ids": [value]})
        assert r.status_code == 400 and r.json()["code"] == "bad_input", r.text
        assert len(stored_texts(c, "u")) == 12


def test_a_string_that_looks_like_a_list_is_not_a_list_of_ids(service, memory):
    ids = memory.add("ids-str", notes(2))
    fails(lambda: memory.forget("ids-str", f"[{ids[0]}]"), BadInput)
    fails(lambda: memory.forget("ids-str", {ids[0]: True}), BadInput)
    assert len(memory.export("ids-str")) == 2
    with http(service) as c:
        ids = c.post("/v1/users/ids-str/messages", json={"messages": notes(2)}).json()["ids"]
        r = c.post("/v1/users/ids-str/forget", json={"message_ids": f"[{ids[0]}]"})
        assert r.status_code == 400 and len(stored_texts(c, "ids-str")) == 2


def test_python_takes_any_iterable_of_ids_and_reads_it_once(memory):
    ids = memory.add("iter", notes(6))
    assert memory.forget("iter", (i for i in ids[:2])) == 2  # a generator: used up by a check once
    assert memory.forget("iter", {ids[2]}) == 1
    assert memory.forget("iter", range(ids[3], ids[4] + 1)) == 2
    assert memory.forget("iter", dict.fromkeys([ids[5]]).keys()) == 1
    fails(lambda: memory.export("iter"), UnknownUser)


# ---- forgetting everything is explicit


def test_forgetting_everything_is_its_own_call_never_a_missing_field(service, memory):
    memory.add("all", notes(3))
    for call in (lambda: memory.forget("all"), lambda: memory.forget("all", None)):
        assert "forget_all" in str(fails(call, BadInput))
    assert len(memory.export("all")) == 3
    assert memory.forget_all("all") == 3
    fails(lambda: memory.export("all"), UnknownUser)
    with http(service) as c:
        c.post("/v1/users/all/messages", json={"messages": notes(3)})
        for body in ({}, {"message_ids": None}):
            r = c.post("/v1/users/all/forget", json=body)
            assert r.status_code == 400 and r.json()["code"] == "bad_input"
            assert "DELETE /v1/users/{user_id}" in r.json()["detail"]
        assert len(stored_texts(c, "all")) == 3
        assert c.delete("/v1/users/all").json() == {"deleted": 3}
        assert c.get("/v1/users/all/export").status_code == 404


def test_an_empty_forget_changes_nothing(service, memory):
    memory.add("empty", notes(2))
    before = memory.store.generations([("default", "empty")])
    assert memory.forget("empty", []) == 0
    assert memory.store.generations([("default", "empty")]) == before  # no new generation, caches kept
    assert len(memory.export("empty")) == 2
    fails(lambda: memory.forget("nobody", []), UnknownUser)
    with http(service) as c:
        c.post("/v1/users/empty/messages", json={"messages": notes(2)})
        assert c.post("/v1/users/empty/forget", json={"message_ids": []}).json() == {"deleted": 0}
        assert len(stored_texts(c, "empty")) == 2


# ---- error codes


def test_each_kind_of_error_has_one_code_on_both_interfaces(service, memory):
    memory.add("codes", notes(1))
    python = {
        "unknown_user": fails(lambda: memory.query("nobody", "x?"), UnknownUser).code,
        "unknown_messages": fails(lambda: memory.forget("codes", [2**40]), UnknownMessages).code,
        "bad_input": fails(lambda: memory.add("codes", []), BadInput).code,
    }
    with http(service) as c:
        c.post("/v1/users/codes/messages", json={"messages": notes(1)})
        over_http = {
            "unknown_user": c.post("/v1/users/nobody/query", json={"question": "x?"}),
            "unknown_messages": c.post("/v1/users/codes/forget", json={"message_ids": [2**40]}),
            "bad_input": c.post("/v1/users/codes/messages", json={"messages": []}),
        }
        unauthorized = httpx.get(service.url + "/v1/users/codes/export")
    assert python == {code: code for code in python}
    assert {code: r.json()["code"] for code, r in over_http.items()} == python
    assert [r.status_code for r in over_http.values()] == [404, 404, 400]
    assert unauthorized.status_code == 401 and unauthorized.json()["code"] == "unauthorized"


def test_a_body_that_cannot_be_parsed_is_bad_input_and_no_reply_echoes_much(service, memory):
    fails(lambda: memory.import_("parse", None), BadInput)
    with http(service) as c:
        json_type = {"content-type": "application/json"}
        not_utf8 = c.post("/v1/users/parse/messages", content=b'{"messages": "\xff"}', headers=json_type)
        assert not_utf8.status_code == 400 and not_utf8.json()["code"] == "bad_input"
        huge = c.post(
            "/v1/users/parse/forget", content=b'{"message_ids": [' + b"1" * 3000 + b"]}", headers=json_type
        )
        assert (
            huge.status_code == 400
            and huge.json()["code"] == "bad_input"
            and len(huge.json()["detail"]) <= 500
        )
        missing = c.get("/v1/nowhere")
        assert missing.status_code == 404 and missing.json()["code"] == "not_found"


def test_unknown_ids_are_counted_not_echoed(service, memory):
    memory.add("many", notes(1))
    err = fails(lambda: memory.forget("many", range(10**6, 10**6 + 70_000)), UnknownMessages)
    assert str(err).startswith("70000 message ids are not stored") and len(str(err)) < 200
    with http(service) as c:
        c.post("/v1/users/many/messages", json={"messages": notes(1)})
        r = c.post("/v1/users/many/forget", json={"message_ids": list(range(10**6, 10**6 + 300))})
        assert r.status_code == 404 and "300 message ids" in r.json()["detail"]
        assert len(r.content) < 400


def test_the_openapi_schema_states_the_contract(service):
    schema = httpx.get(service.url + "/openapi.json").json()
    bodies = schema["components"]["schemas"]
    assert bodies["ForgetRequest"]["required"] == ["message_ids"]
    assert bodies["ForgetRequest"]["additionalProperties"] is False
    assert bodies["MessageIn"]["additionalProperties"] is False
    assert set(bodies["ErrorReply"]["properties"]) == {"code", "detail"}
    assert "delete" in schema["paths"]["/v1/users/{user_id}"]
    add = schema["paths"]["/v1/users/{user_id}/messages"]["post"]
    assert "Idempotency-Key" in [p["name"] for p in add["parameters"]]
    assert {"409", "503"} <= set(add["responses"])


# ---- imports say where they stopped


def test_an_import_names_the_line_that_stopped_it_and_what_was_kept(service):
    lines = [json.dumps({"role": "user", "text": f"line {n}"}) for n in range(1, 151)]
    lines[149] = json.dumps({"role": "user", "text": "  "})
    ndjson = {"Content-Type": "application/x-ndjson"}
    with http(service) as c:
        r = c.post("/v1/users/imp/import", content="\n".join(lines), headers=ndjson)
        assert r.status_code == 400 and r.json()["code"] == "bad_input"
        assert r.json()["detail"].startswith("line 150: text must be a non-empty string")
        assert "140 messages of this import stored before it" in r.json()["detail"]  # 7 batches of 20
        assert r.json()["stored"] == 140 == len(stored_texts(c, "imp"))


def test_a_source_reused_for_another_message_is_refused_not_skipped(service, memory):
    memory.import_("reuse", [{"role": "user", "text": "a", "source": "s1"}])
    fails(lambda: memory.import_("reuse", [{"role": "user", "text": "CHANGED", "source": "s1"}]), BadInput)
    assert [m["text"] for m in memory.export("reuse")] == ["a"]
    ndjson = {"Content-Type": "application/x-ndjson"}
    with http(service) as c:
        line = {"role": "user", "text": "a", "source": "s1"}
        assert c.post("/v1/users/reuse/import", content=json.dumps(line), headers=ndjson).status_code == 201
        changed = json.dumps(line | {"text": "CHANGED"})
        r = c.post("/v1/users/reuse/import", content=changed, headers=ndjson)
        assert r.status_code == 400 and r.json()["code"] == "bad_input"
        assert "source 's1'" in r.json()["detail"]
        assert stored_texts(c, "reuse") == ["a"]


def test_a_streamed_import_over_its_bound_is_413_and_says_what_it_kept(service):
    def body():  # 20 lines (a batch) at a time, about 1,000 bytes: the bound (6,000 bytes) is passed midway
        for part in range(10):
            lines = (json.dumps({"role": "user", "text": f"streamed line {part}.{n}"}) for n in range(20))
            yield ("".join(line + "\n" for line in lines)).encode()
            time.sleep(0.3)  # the server stores each batch as it comes

    with http(service) as c:
        r = c.post("/v1/users/big/import", content=body(), headers={"Content-Type": "application/x-ndjson"})
        assert r.status_code == 413 and r.json()["code"] == "too_large", r.text
        kept = len(stored_texts(c, "big"))
        assert r.json()["stored"] == kept > 0 and f"{kept} messages of this import" in r.json()["detail"]


# ---- idempotency


def test_an_idempotency_key_stores_a_retried_add_once(service, memory):
    first = memory.add("idem", notes(2), idempotency_key="k-1")
    assert memory.add("idem", notes(2), idempotency_key="k-1") == first
    assert len(memory.export("idem")) == 2
    err = fails(lambda: memory.add("idem", notes(2, "SECRET"), idempotency_key="k-1"), IdempotencyConflict)
    assert err.code == "idempotency_conflict" and "SECRET" not in str(err)
    assert memory.add("idem-2", notes(2), idempotency_key="k-1") != first  # keys are per user
    fails(lambda: memory.add("idem", notes(1), idempotency_key="has space"), BadInput)

    with http(service) as c:
        headers = {"Idempotency-Key": "k-1"}
        one = c.post("/v1/users/idem/messages", json={"messages": notes(2)}, headers=headers)
        two = c.post("/v1/users/idem/messages", json={"messages": notes(2)}, headers=headers)
        assert one.status_code == two.status_code == 201 and one.json() == two.json()
        other = c.post("/v1/users/idem/messages", json={"messages": notes(1)}, headers=headers)
        assert other.status_code == 409 and other.json()["code"] == "idempotency_conflict"
        assert len(stored_texts(c, "idem")) == 2


def test_concurrent_retries_with_one_key_get_the_same_ids(service):
    replies, start = [], threading.Barrier(6)

    def send():
        with http(service) as c:
            start.wait()
            r = c.post(
                "/v1/users/race/messages", json={"messages": notes(3)}, headers={"Idempotency-Key": "race-1"}
            )
            replies.append((r.status_code, r.json()))

    threads = [threading.Thread(target=send) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {status for status, _ in replies} == {201}
    assert len({tuple(body["ids"]) for _, body in replies}) == 1
    with http(service) as c:
        assert len(stored_texts(c, "race")) == 3


def test_forgetting_everything_also_forgets_the_users_keys(memory):
    first = memory.add("idem-forget", notes(1), idempotency_key="k")
    memory.forget("idem-forget", first)  # some messages: the key is kept, a retry stores nothing
    assert memory.add("idem-forget", notes(1), idempotency_key="k") == first
    fails(lambda: memory.export("idem-forget"), UnknownUser)
    memory.add("idem-forget", notes(1, "again"))
    memory.forget_all("idem-forget")
    again = memory.add("idem-forget", notes(1), idempotency_key="k")  # the key went with the user
    assert again != first and len(memory.export("idem-forget")) == 1
