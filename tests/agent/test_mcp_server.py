"""`lazymem mcp` driven by the MCP SDK's own stdio client: the server is a real subprocess speaking MCP. One
server serves the module's tests (it takes seconds to start); each test keeps to users of its own."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import select
import subprocess
import sys
import threading

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from agent_helpers import ROOT


def _command(tmp) -> list[str]:
    return ["-m", "lazymem.run", "mcp", "method=rag", f"agent.dir={tmp / 'data'}", f"paths.cache={tmp}/c"]


class _Server:
    """A ClientSession on a `lazymem mcp` subprocess, held open by an event loop in a thread of its own, so
    that tests call tools synchronously."""

    def __init__(self, tmp):
        params = StdioServerParameters(command=sys.executable, args=_command(tmp), cwd=str(ROOT))
        self._loop = asyncio.new_event_loop()
        self._opened = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._hold(params),))
        self._thread.start()
        self.session, self._stop = self._opened.result(timeout=120)

    async def _hold(self, params) -> None:
        try:
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                stop = asyncio.Event()
                self._opened.set_result((session, stop))
                await stop.wait()
        except BaseException as e:
            if not self._opened.done():
                self._opened.set_exception(e)
            raise

    def run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=120)

    def call(self, tool: str, arguments: dict):
        return self.run(self.session.call_tool(tool, arguments))

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(60)
        self._loop.close()


@pytest.fixture(scope="module")
def mcp(tmp_path_factory):
    server = _Server(tmp_path_factory.mktemp("mcp"))
    yield server
    server.close()


def ok(reply) -> dict:
    assert not reply.is_error, reply.content
    assert json.loads(reply.content[0].text) == reply.structured_content
    return reply.structured_content


def refused(reply, code: str) -> str:
    """The message of a tool error with `code`: its text is `[code] message`, its structured content
    `{"code", "message"}`."""
    assert reply.is_error, reply.content
    text = reply.content[0].text
    assert text.startswith(f"[{code}] "), text
    message = text.removeprefix(f"[{code}] ")
    assert reply.structured_content == {"code": code, "message": message}
    return message


def test_the_four_tools_take_only_their_arguments_and_say_which_delete(mcp):
    tools = {t.name: t for t in mcp.run(mcp.session.list_tools()).tools}
    assert set(tools) == {"remember", "recall", "forget", "forget_all"}
    for tool in tools.values():
        assert tool.input_schema["additionalProperties"] is False, tool.name
    forget = tools["forget"].input_schema
    assert forget["required"] == ["message_ids"]
    assert forget["properties"]["message_ids"]["items"] == {"type": "integer"}
    assert set(tools["remember"].input_schema["properties"]) == {
        "text",
        "role",
        "time",
        "session_id",
        "user_id",
        "idempotency_key",
    }
    for name in ("forget", "forget_all"):
        hints = tools[name].annotations
        assert hints.destructive_hint is True and hints.read_only_hint is False and hints.idempotent_hint
    assert tools["recall"].annotations.read_only_hint is True
    assert tools["remember"].annotations.destructive_hint is False
    assert "forget_all" in tools["forget"].description


def test_remember_recall_forget_over_stdio(mcp):
    first = ok(mcp.call("remember", {"text": "My sister Ada lives in Oslo."}))
    ok(mcp.call("remember", {"text": "I prefer tea.", "time": "2025-03-01"}))
    other = ok(mcp.call("remember", {"text": "Bob's note", "user_id": "bob"}))
    assert len(other["ids"]) == 1
    found = ok(mcp.call("recall", {"question": "Where does Ada live?"}))
    assert "Oslo" in found["memory"] and found["tokens"] > 0
    assert first["ids"][0] in [m["id"] for m in found["messages"]]
    assert "Bob's note" not in found["memory"]  # another user's memory
    assert ok(mcp.call("forget", {"message_ids": first["ids"]})) == {"deleted": 1}
    assert "Oslo" not in ok(mcp.call("recall", {"question": "Ada?"}))["memory"]
    assert ok(mcp.call("forget", {"message_ids": []})) == {"deleted": 0}
    assert ok(mcp.call("forget_all", {})) == {"deleted": 1}  # the tea
    assert refused(mcp.call("recall", {"question": "tea?"}), "unknown_user").startswith("unknown user")
    assert refused(mcp.call("forget_all", {}), "unknown_user")
    assert "Bob's note" in ok(mcp.call("recall", {"question": "note?", "user_id": "bob"}))["memory"]
    assert "text must be a non-empty string" in refused(mcp.call("remember", {"text": "  "}), "bad_input")


def _remembered(mcp, user: str, text: str = "The spare key is under the blue pot.") -> int:
    return ok(mcp.call("remember", {"text": text, "user_id": user}))["ids"][0]


def _still_there(mcp, user: str) -> None:
    assert "blue pot" in ok(mcp.call("recall", {"question": "Where is the key?", "user_id": user}))["memory"]


@pytest.mark.parametrize(
    "arguments",
    [
        {"ids": [1]},
        {"message_ids": [1], "dry_run": True},
        {"messageIds": [1]},
        {"message_id": 1},
        {},
        {"message_ids": None},
    ],
    ids=["ids", "dry_run", "messageIds", "message_id", "none", "null"],
)
def test_forget_refuses_arguments_it_does_not_take_and_deletes_nothing(mcp, arguments, request):
    user = f"forget-{request.node.callspec.id}"
    known = _remembered(mcp, user)
    arguments = {k: [known] if isinstance(v, list) else v for k, v in arguments.items()}
    message = refused(mcp.call("forget", {**arguments, "user_id": user}), "bad_input")
    assert message.startswith("forget: ") and "Its arguments: message_ids (required), user_id" in message
    unknown = set(arguments) - {"message_ids"}
    if unknown:
        assert all(f'unknown argument "{name}"' in message for name in unknown), message
    else:  # message_ids left out or null: the refusal names the tool that deletes everything
        assert "message_ids" in message and "call forget_all" in message
    _still_there(mcp, user)


@pytest.mark.parametrize(
    "coerced",
    [
        lambda i: [str(i)],
        lambda i: [float(i)],
        lambda i: json.dumps([i]),
        lambda i: [True],
        lambda i: [f" {i} "],
    ],
    ids=["string", "float", "json-text", "bool", "spaced"],
)
def test_forget_takes_ids_as_integers_only(mcp, coerced, request):
    user = f"coerce-{request.node.callspec.id}"
    known = _remembered(mcp, user)
    message = refused(mcp.call("forget", {"message_ids": coerced(known), "user_id": user}), "bad_input")
    assert "message_ids" in message and ("must be an integer" in message or "must be a list" in message)
    assert ok(mcp.call("forget", {"message_ids": [known], "user_id": user})) == {"deleted": 1}


def test_remember_refuses_unknown_and_mistyped_arguments(mcp):
    user = "strict-remember"
    message = refused(mcp.call("remember", {"text": "x", "tags": ["a"], "user_id": user}), "bad_input")
    assert 'unknown argument "tags"' in message and "text (required), role, time" in message
    assert refused(mcp.call("remember", {"text": 5, "user_id": user}), "bad_input").startswith(
        "remember: text must be a string, not 5"
    )
    refused(mcp.call("remember", {"text": "x", "user_id": ["u"]}), "bad_input")
    refused(mcp.call("recall", {"question": "x", "user_id": user}), "unknown_user")  # nothing was stored
    message = refused(mcp.call("recall", {"question": "x", "user": user}), "bad_input")
    assert 'unknown argument "user"' in message and "question (required), now, user_id" in message


def test_forget_all_deletes_every_memory_of_the_user(mcp):
    ids = [_remembered(mcp, "everything", f"note {n}") for n in range(3)]
    kept = _remembered(mcp, "someone-else")
    assert ok(mcp.call("forget_all", {"user_id": "everything"})) == {"deleted": 3}
    refused(mcp.call("recall", {"question": "note?", "user_id": "everything"}), "unknown_user")
    refused(mcp.call("forget", {"message_ids": ids, "user_id": "everything"}), "unknown_user")
    assert ok(mcp.call("forget", {"message_ids": [kept], "user_id": "someone-else"})) == {"deleted": 1}


def test_an_idempotency_key_stores_a_message_once(mcp):
    call = {"text": "Paid the rent for May.", "user_id": "retry", "idempotency_key": "rent-2025-05"}
    first = ok(mcp.call("remember", call))
    assert ok(mcp.call("remember", call)) == first  # the retry
    message = refused(
        mcp.call("remember", {**call, "text": "Paid the rent for June."}), "idempotency_conflict"
    )
    assert message
    assert ok(mcp.call("forget_all", {"user_id": "retry"})) == {"deleted": 1}


def test_tool_errors_carry_their_code(mcp):
    known = _remembered(mcp, "codes")
    message = refused(mcp.call("recall", {"question": "x", "user_id": "nobody"}), "unknown_user")
    assert message == "unknown user 'nobody': no stored messages"
    message = refused(
        mcp.call("forget", {"message_ids": [known + 1000], "user_id": "codes"}), "unknown_messages"
    )
    assert "nothing was deleted" in message
    with pytest.raises(MCPError, match="Unknown tool: forget_everything"):
        mcp.call("forget_everything", {})
    _still_there(mcp, "codes")


def test_a_line_that_is_not_a_json_rpc_message_gets_its_error_reply(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, *_command(tmp_path)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )

    def reply(line: bytes) -> dict:
        proc.stdin.write(line + b"\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        assert ready, f"no reply to {line!r}"
        return json.loads(proc.stdout.readline())

    try:
        for line, code in ((b"{not json", -32700), (b'{"x": "\\ud800', -32700), (b"[1, 2]", -32600)):
            answer = reply(line)
            assert answer["jsonrpc"] == "2.0" and answer["id"] is None and answer["error"]["code"] == code
        hello = {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        }
        answer = reply(
            json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}).encode()
        )
        assert answer["id"] == 1 and answer["result"]["serverInfo"]["name"] == "lazymem"  # still serving
    finally:
        proc.kill()
        proc.wait()
