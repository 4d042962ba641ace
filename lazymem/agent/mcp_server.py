"""`lazymem mcp`: remember / recall / forget / forget_all as Model Context Protocol tools over stdio.

    lazymem mcp [overrides]       # e.g. method=rag agent.dir=~/.lazymem mcp.user=me

An MCP client starts this as a subprocess (its stdout is the protocol channel, so nothing else may print
there). The tools act on `mcp.user` of tenant `mcp.tenant` unless a call names another `user_id`.

A tool takes exactly the arguments its input schema lists, each of exactly its JSON type: an unknown
argument or a mistyped one (an id sent as "13", 12.0 or true) is refused, never dropped or coerced, so a
misspelt argument cannot change what a call does (a `forget` that lost its ids must not forget everything).
A tool error's text opens with its code, `[unknown_user] unknown user 'x': ...` (lazymem/agent/errors.py),
and its structured content is `{"code", "message"}`.

The server is the SDK's low-level `Server`: its handlers get a call's raw arguments (MCPServer's tools get
them through a lax pydantic model that drops unknown names and parses the string "[4]" as a list: mcp
2.3.0's mcp/server/mcpserver/utilities/func_metadata.py:146 and :256) and return the result as they build
it (MCPServer puts "Error executing tool ..." before a tool error's text:
mcp/server/mcpserver/tools/base.py:210).
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import re
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import anyio
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    CallToolRequestParams,
    CallToolResult,
    ErrorData,
    JSONRPCError,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
    ToolAnnotations,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lazymem.agent.entry import load
from lazymem.agent.errors import AgentError, BadInput
from lazymem.agent.memory import Memory
from lazymem.agent.settings import one_line
from lazymem.agent.telemetry_mcp import trace_tool_calls
from lazymem.validate import ConfigError

logger = logging.getLogger(__name__)
_SURROGATE = re.compile("[\ud800-\udfff]")
_USER = "Whose memory (default: the server's user, mcp.user)"


class _Arguments(BaseModel):
    """A tool's arguments: no other names, and no coercion (strict: "13", 12.0 and true are not integers)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    # what to call instead when an argument is left out or null, for the refusal to say
    if_absent: ClassVar[dict[str, str]] = {}


class RememberArguments(_Arguments):
    text: str = Field(description="The message, stored verbatim")
    role: str = Field("user", description="Who said it, for example user or assistant")
    time: str | None = Field(None, description="When it was said, as text (default: now)")
    session_id: str | None = Field(None, description="The conversation it belongs to")
    user_id: str | None = Field(None, description=_USER)
    idempotency_key: str | None = Field(
        None,
        description="Makes a retry safe: the same key with the same message stores nothing new and returns "
        "the first call's ids; the same key with another message is refused",
    )


class RecallArguments(_Arguments):
    question: str = Field(description="What to recall memories for")
    now: str | None = Field(None, description="When the question is asked, as text (default: now)")
    user_id: str | None = Field(None, description=_USER)


class ForgetArguments(_Arguments):
    message_ids: list[int] = Field(description="The ids of the memories to delete (from remember or recall)")
    user_id: str | None = Field(None, description=_USER)

    if_absent: ClassVar[dict[str, str]] = {
        "message_ids": "to delete every memory of the user, call forget_all"
    }


class ForgetAllArguments(_Arguments):
    user_id: str | None = Field(None, description=_USER)


@dataclass(frozen=True)
class _Session:
    """What a server's tools act on: its memory, its tenant, and the user of a call that names none."""

    memory: Memory
    tenant: str
    default_user: str

    def user(self, arguments: Any) -> str:
        return self.default_user if arguments.user_id is None else arguments.user_id


async def remember(s: _Session, a: RememberArguments) -> dict[str, Any]:
    """Store one message verbatim (role: who said it; time: when, as text, default now); its id. With an
    idempotency_key, a retry stores nothing new and returns the same ids."""
    message = {"role": a.role, "text": a.text, "time": a.time, "session_id": a.session_id}
    ids = await s.memory.aadd(s.user(a), [message], tenant=s.tenant, idempotency_key=a.idempotency_key)
    return {"ids": ids}


async def recall(s: _Session, a: RecallArguments) -> dict[str, Any]:
    """The memory relevant to `question` (asked at `now`, default the current time): the memory block,
    and the kept messages with their ids (for forget)."""
    found = await s.memory.aquery(s.user(a), a.question, a.now, tenant=s.tenant)
    return {"memory": found.text, "messages": found.messages, "tokens": found.tokens}


async def forget(s: _Session, a: ForgetArguments) -> dict[str, Any]:
    """Delete the given memories by id, for good; how many. An id the user does not have deletes nothing
    (unknown_messages). To delete every memory of the user, call forget_all."""
    return {"deleted": await s.memory.aforget(s.user(a), a.message_ids, tenant=s.tenant)}


async def forget_all(s: _Session, a: ForgetAllArguments) -> dict[str, Any]:
    """Delete every memory of the user, for good; how many."""
    return {"deleted": await s.memory.aforget_all(s.user(a), tenant=s.tenant)}


@dataclass(frozen=True)
class _Tool:
    """One tool: its arguments, what it does with them (its docstring is the tool's description) and its
    hints to the client."""

    run: Callable[[_Session, Any], Awaitable[dict[str, Any]]]
    arguments: type[_Arguments]
    annotations: ToolAnnotations

    @property
    def name(self) -> str:
        return self.run.__name__

    def listing(self) -> Tool:
        return Tool(
            name=self.name,
            description=inspect.getdoc(self.run),
            input_schema=self.arguments.model_json_schema(),
            annotations=self.annotations,
        )

    async def call(self, session: _Session, arguments: dict[str, Any]) -> CallToolResult:
        try:
            valid = self.arguments.model_validate(arguments)
        except ValidationError as e:
            return _error(_refused(self.name, self.arguments, e))
        try:
            result = await self.run(session, valid)
        except AgentError as e:
            return _error(e)
        except Exception:  # a bug: its text may hold anything, so it stays in the server's log
            logger.exception("tool %s failed", self.name)
            return _error(AgentError(f"{self.name} failed; the server's log has the details"))
        return CallToolResult(
            content=[TextContent(type="text", text=json.dumps(result))], structured_content=result
        )


# open_world_hint False: the tools touch this memory only. Deleting is idempotent: a second call deletes
# nothing more (it is refused: unknown_messages, unknown_user).
_ADDS = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
_READS = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_DELETES = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)
TOOLS = {
    tool.name: tool
    for tool in (
        _Tool(remember, RememberArguments, _ADDS),
        _Tool(recall, RecallArguments, _READS),
        _Tool(forget, ForgetArguments, _DELETES),
        _Tool(forget_all, ForgetAllArguments, _DELETES),
    )
}


def build_server(memory: Memory, tenant: str, default_user: str) -> Server:
    """The MCP server of `TOOLS` on `memory`, for `tenant`; a call without `user_id` acts on
    `default_user`."""
    session = _Session(memory, tenant, default_user)
    listing = ListToolsResult(tools=[tool.listing() for tool in TOOLS.values()])

    async def list_tools(ctx: ServerRequestContext, params: PaginatedRequestParams | None) -> ListToolsResult:
        return listing

    async def call_tool(ctx: ServerRequestContext, params: CallToolRequestParams) -> CallToolResult:
        tool = TOOLS.get(params.name)
        if tool is None:  # a protocol error, as the MCP spec's tools page has it
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {params.name}; the tools are {', '.join(TOOLS)}")
        return await tool.call(session, params.arguments or {})

    return Server(
        "lazymem",
        instructions=(
            "Long-term memory. Call remember with anything worth keeping (it is stored verbatim, cheaply); "
            "call recall with a question to get the relevant memories; forget deletes the given memories for "
            "good, forget_all every memory of the user."
        ),
        on_list_tools=list_tools,
        on_call_tool=trace_tool_calls(memory.telemetry, call_tool, TOOLS),
    )


def _error(error: AgentError) -> CallToolResult:
    """A tool error as the client gets it: the text `[code] message`, and `{"code", "message"}` as structured
    content (which the SDK's client checks against no output schema on an error: mcp/client/session.py:1101).
    """
    text = f"[{error.code}] {error}"
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content={"code": error.code, "message": str(error)},
        is_error=True,
    )


_EXPECTED = {"string_type": "a string", "int_type": "an integer", "list_type": "a list"}
_SHOWN = 3  # problems named in one refusal; a call may bring thousands


def _refused(tool: str, model: type[_Arguments], error: ValidationError) -> BadInput:
    """The refusal of arguments that are not `model`'s: the first problem of each argument (at most a few),
    and the arguments the tool takes."""
    problems: dict[str, str] = {}
    for e in sorted(error.errors(), key=lambda e: e["type"] != "extra_forbidden"):  # unknown names first
        name, *inside = e["loc"]
        if name in problems:
            continue
        if e["type"] == "extra_forbidden":
            problem = f"unknown argument {_short(json.dumps(name))}"
        elif e["type"] == "missing":
            problem = f"missing argument {json.dumps(name)}"
        else:
            expected = _EXPECTED.get(e["type"], e["msg"])
            if not inside and model.model_fields[name].default is None:
                expected += " or null"
            where = name + "".join(f"[{i}]" for i in inside)
            problem = f"{where} must be {expected}, not {_short(json.dumps(e['input']))}"
        if name in model.if_absent and (e["type"] == "missing" or e["input"] is None):
            problem += f" ({model.if_absent[name]})"
        problems[name] = problem
    shown = list(problems.values())
    if len(shown) > _SHOWN:
        shown[_SHOWN:] = [f"and {len(shown) - _SHOWN} more"]
    takes = ", ".join(f"{n} (required)" if f.is_required() else n for n, f in model.model_fields.items())
    return BadInput(f"{tool}: {'; '.join(shown)}. Its arguments: {takes}")


def _short(text: str, most: int = 40) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


async def serve_stdio(server: Server) -> None:
    """Serve `server` over stdin and stdout. A line that is not a JSON-RPC message gets its JSON-RPC error
    reply, written by the transport's own writer: the SDK's stdio transport passes such a line on as an
    exception (mcp/server/stdio.py:191), which the server would only debug-log and drop
    (mcp/shared/jsonrpc_dispatcher.py:555), leaving the client to wait for a reply forever."""
    async with stdio_server() as (incoming, outgoing):
        send, messages = anyio.create_memory_object_stream[SessionMessage](0)

        async def sift() -> None:
            async with send:
                async for item in incoming:
                    if isinstance(item, Exception):
                        await outgoing.send(SessionMessage(_unreadable(item)))
                    else:
                        await send.send(item)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(sift)
            await server.run(messages, outgoing, server.create_initialization_options())
            tasks.cancel_scope.cancel()


def _unreadable(error: Exception) -> JSONRPCError:
    """The reply to a line the transport could not read (JSON-RPC 2.0, section 5.1): -32700 when it is not
    JSON, -32600 when it is JSON but not a message; its id is null, as the line's id could not be read."""
    if not isinstance(error, ValidationError) or any(e["type"] == "json_invalid" for e in error.errors()):
        reply = ErrorData(code=PARSE_ERROR, message="Parse error: the line is not JSON")
    else:
        reply = ErrorData(code=INVALID_REQUEST, message="Invalid Request: the line is not a JSON-RPC message")
    return JSONRPCError(jsonrpc="2.0", id=None, error=reply)


def without_surrogates(line: bytes) -> bytes:
    """A JSON-RPC line whose strings hold no lone surrogate. JSON may escape one (`"\\ud800"`); the SDK's
    parser refuses such a line and the request goes unanswered. Each becomes a NUL, which the tools refuse
    as text that is not valid, so the caller gets a tool error instead of silence."""
    if b"\\u" not in line:
        return line
    try:
        message = json.loads(line)
    except ValueError:
        return line  # not JSON: the transport refuses it, and serve_stdio answers with a parse error

    def clean(value):
        if isinstance(value, str):
            return _SURROGATE.sub("\x00", value)
        if isinstance(value, list):
            return [clean(v) for v in value]
        if isinstance(value, dict):
            return {clean(k): clean(v) for k, v in value.items()}
        return value

    cleaned = clean(message)
    return line if cleaned == message else json.dumps(cleaned).encode() + b"\n"


def _guard_stdin() -> None:
    """Put a pipe on fd 0 that carries stdin's lines through `without_surrogates`."""
    read_end, write_end = os.pipe()
    source = os.dup(0)
    os.dup2(read_end, 0)
    os.close(read_end)

    def pump() -> None:
        with open(source, "rb") as src, open(write_end, "wb", buffering=0) as dst:
            for line in src:
                dst.write(without_surrogates(line))

    threading.Thread(target=pump, name="lazymem-mcp-stdin", daemon=True).start()


def main(overrides: Sequence[str]) -> int:
    """`lazymem mcp [overrides]`: serve the tools over stdio until the client closes the pipe. The config
    is checked as every task's is (lazymem/agent/entry.py): a bad setting or a missing model stops the
    start-up with one line on stderr naming the key."""
    try:
        cfg, settings = load(overrides)
    except ConfigError as e:
        raise SystemExit(f"lazymem mcp: {one_line(e)}") from None
    memory = Memory.from_cfg(cfg, settings)
    _guard_stdin()
    try:
        anyio.run(serve_stdio, build_server(memory, settings.mcp.tenant, settings.mcp.user))
    finally:
        memory.close()
    return 0
