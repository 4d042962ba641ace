"""What fault and bad-input probes broke, through every path that has it: the real service (`lazymem serve`
over HTTP), the Python API, and MCP (a raw JSON-RPC exchange with `lazymem mcp` over stdio)."""

from __future__ import annotations

import json
import select
import subprocess
import sys
import time

import httpx
import pytest

from lazymem.agent.memory import BadInput

from agent_helpers import ROOT, Service

pytestmark = pytest.mark.slow

KEYS = {"a": "probe-key-a-0123456789", "b": "probe-key-b-0123456789"}
# a JSON-RPC tool call written by hand: the escapes reach the server as sent
TOOL_CALL = (
    '{"jsonrpc": "2.0", "id": %d, "method": "tools/call", '
    '"params": {"name": "remember", "arguments": {"text": "%s"}}}'
)
SURROGATE_BODY = '{"messages": [{"role": "user", "text": "bad \\ud800 text"}]}'


def _serve(tmp, keys_yaml: str) -> subprocess.CompletedProcess:
    keys = tmp / "keys.yaml"
    keys.write_text(keys_yaml)
    return subprocess.run(
        [sys.executable, "-m", "lazymem.run", "serve", "method=rag", f"serve.keys_file={keys}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("days", ["-1", "thirty", "true"])
def test_a_bad_retention_refuses_start_up_naming_tenant_and_field(tmp_path, days):
    done = _serve(
        tmp_path,
        f"good: {{keys: [k1-0123456789]}}\nshaky: {{keys: [k2-0123456789], retention_days: {days}}}\n",
    )
    assert done.returncode != 0
    assert "tenant 'shaky', retention_days" in done.stderr and "expected a number of days >= 0" in done.stderr


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("probes")
    keys = tmp / "keys.yaml"
    keys.write_text(f"a: {{keys: [{KEYS['a']}], retention_days: 30}}\nb: {{keys: [{KEYS['b']}]}}\n")
    svc = Service(tmp, "method=rag", f"serve.keys_file={keys}", "serve.purge_every_s=0.5")
    yield svc
    svc.stop()


def client(tenant: str, svc) -> httpx.Client:
    return httpx.Client(base_url=svc.url, headers={"Authorization": f"Bearer {KEYS[tenant]}"}, timeout=60)


def test_text_that_is_not_valid_unicode_is_a_400(service):
    c = client("a", service)
    raw = {"Content-Type": "application/json"}
    r = c.post("/v1/users/ann/messages", content=SURROGATE_BODY, headers=raw)
    assert r.status_code == 400 and "not valid text" in r.json()["detail"], r.text
    assert (
        c.post("/v1/users/ann/messages", json={"messages": [{"role": "user", "text": "fine"}]}).status_code
        == 201
    )
    question = '{"question": "where \\udc00 is it?"}'
    r = c.post("/v1/users/ann/query", content=question, headers=raw)
    assert r.status_code == 400 and "question is not valid text" in r.json()["detail"]
    r = c.post("/v1/users/ann/forget", json={"message_ids": [2**63]})
    assert r.status_code == 400 and "message_ids" in r.json()["detail"]
    r = c.post("/v1/users/ann/forget", json={"message_ids": [2**70]})
    assert r.status_code == 400


def test_user_ids_that_are_not_utf8_are_refused(service):
    c = client("a", service)
    body = {"messages": [{"role": "user", "text": "x"}]}
    for raw in ("%FE", "%FF", "u%C3"):
        r = c.post(f"/v1/users/{raw}/messages", json=body)
        assert r.status_code == 400 and "not valid UTF-8" in r.json()["detail"]
    assert c.post("/v1/users/%C3%A9l%C3%A8ve/messages", json=body).status_code == 201  # "élève" is fine


def test_ids_reveal_nothing_of_other_tenants(service):
    a, b = client("a", service), client("b", service)
    one = {"messages": [{"role": "user", "text": "note"}]}
    first = a.post("/v1/users/ids/messages", json=one).json()["ids"][0]
    for _ in range(5):
        b.post("/v1/users/ids/messages", json=one)
    assert a.post("/v1/users/ids/messages", json=one).json()["ids"][0] == first + 1


def test_a_key_in_the_query_string_never_reaches_the_log(service):
    r = httpx.get(f"{service.url}/v1/users/ann/export?api_key={KEYS['a']}", timeout=30)
    assert r.status_code == 401
    time.sleep(0.5)
    log = service.log.read_text()
    assert "/v1/users/ann/export?[redacted]" in log and KEYS["a"] not in log


def test_health_reports_the_last_successful_purge(service):
    deadline = time.monotonic() + 30
    while True:
        retention = httpx.get(f"{service.url}/health", timeout=10).json()["retention"]
        if retention["last_success"] is not None or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert retention["tenants"] == 1 and retention["failing_tenants"] == 0
    assert abs(time.time() - retention["last_success"]) < 60


def test_the_python_api_raises_bad_input(tmp_path):
    from lazymem import Memory

    with Memory.from_config(["method=rag", f"agent.dir={tmp_path / 'data'}", f"paths.cache={tmp_path}"]) as m:
        ids = m.add("kim", [{"role": "user", "text": "My bike is red."}])
        for call in (
            lambda: m.add("kim", [{"role": "user", "text": "bad \ud800"}]),
            lambda: m.add("kim\udfff", [{"role": "user", "text": "x"}]),
            lambda: m.add("kim", [{"role": "user", "text": "nul \x00 byte"}]),
            lambda: m.query("kim", "colour \ud800?"),
            lambda: m.forget("kim", [2**63]),
            lambda: m.forget("kim", [0]),
            lambda: m.purge(float("nan")),
        ):
            with pytest.raises(BadInput):
                call()
        assert [r["id"] for r in m.export("kim")] == ids  # nothing was stored or deleted


def test_mcp_answers_a_lone_surrogate_with_a_tool_error(tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lazymem.run",
            "mcp",
            "method=rag",
            f"agent.dir={tmp_path}/d",
            f"paths.cache={tmp_path}",
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )

    def call(line: str) -> dict:
        proc.stdin.write(line.encode() + b"\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        assert ready, "no reply from lazymem mcp"
        return json.loads(proc.stdout.readline())

    try:
        hello = {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "probe", "version": "0"},
        }
        assert "result" in call(
            json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello})
        )
        proc.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        bad = call(TOOL_CALL % (2, "a \\ud800"))
        assert bad["id"] == 2 and bad["result"]["isError"]
        assert "text is not valid text" in bad["result"]["content"][0]["text"]
        good = call(TOOL_CALL % (3, "ok \\u00e9"))
        assert good["result"]["isError"] is False and good["result"]["structuredContent"]["ids"] == [1]
    finally:
        proc.kill()
        proc.wait()


def test_a_streamed_import_stops_at_a_bad_line_and_resumes_by_source(service):
    c = client("b", service)
    ndjson = {"Content-Type": "application/x-ndjson"}
    lines = [json.dumps({"role": "user", "text": f"line {n}", "source": f"f:{n}"}) for n in range(250)]
    broken = [*lines[:180], '{"role": "user", "text": "bad \\ud800"}', *lines[180:]]
    r = c.post("/v1/users/imp/import", content="\n".join(broken), headers=ndjson)
    assert r.status_code == 400 and r.json()["stored"] == 0 and "line 181: text" in r.json()["detail"]
    r = c.post("/v1/users/imp/import", content="\n".join([*lines[:100], '{"role": "user", "txt": "x"}']))
    assert r.status_code == 400 and "line 101: unknown fields ['txt']" in r.json()["detail"]
    r = c.post("/v1/users/imp/import", content="\n".join(lines[:120]), headers=ndjson)
    assert r.status_code == 201 and r.json() == {"stored": 120, "skipped": 0, "forgotten": 0}
    r = c.post("/v1/users/imp/import", content="\n".join(lines) + "\n", headers=ndjson)  # the retry
    assert r.status_code == 201 and r.json() == {"stored": 130, "skipped": 120, "forgotten": 0}
    texts = [m["text"] for m in c.get("/v1/users/imp/export").json()["messages"]]
    assert texts == [f"line {n}" for n in range(250)]  # each once, in order
