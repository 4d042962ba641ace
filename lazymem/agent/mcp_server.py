"""`lazymem mcp`: remember / recall / forget as Model Context Protocol tools over stdio.

    lazymem mcp [overrides]       # e.g. method=rag agent.dir=~/.lazymem mcp.user=me

An MCP client starts this as a subprocess (its stdout is the protocol channel, so nothing else may print
there). The tools act on `mcp.user` of tenant `mcp.tenant` unless a call names another `user_id`.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from lazymem.agent.memory import BadInput, Memory, compose
from lazymem.agent.store import UnknownMessages, UnknownUser

_CALLER_ERRORS = (BadInput, UnknownUser, UnknownMessages)
_SURROGATE = re.compile("[\ud800-\udfff]")


def build_server(memory: Memory, tenant: str, default_user: str) -> MCPServer:
    server = MCPServer(
        "lazymem",
        instructions=(
            "Long-term memory. Call remember with anything worth keeping (it is stored verbatim, cheaply); "
            "call recall with a question to get the relevant memories; forget deletes memories for good."
        ),
    )

    @server.tool()
    async def remember(
        text: str,
        role: str = "user",
        time: str | None = None,
        session_id: str | None = None,
        user_id: str | None = None,
    ) -> dict[str, Any]:
        """Store one message verbatim (role: who said it; time: when, as text, default now); its id."""
        message = {"role": role, "text": text, "time": time, "session_id": session_id}
        with _as_tool_error():
            ids = await memory.aadd(user_id or default_user, [message], tenant=tenant)
        return {"ids": ids}

    @server.tool()
    async def recall(question: str, now: str | None = None, user_id: str | None = None) -> dict[str, Any]:
        """The memory relevant to `question` (asked at `now`, default the current time): the memory
        block, and the kept messages with their ids (for forget)."""
        with _as_tool_error():
            found = await memory.aquery(user_id or default_user, question, now, tenant=tenant)
        return {"memory": found.text, "messages": found.messages, "tokens": found.tokens}

    @server.tool()
    async def forget(message_ids: list[int] | None = None, user_id: str | None = None) -> dict[str, Any]:
        """Delete the given memories by id, or every memory of the user when no ids are given."""
        with _as_tool_error():
            deleted = await memory.aforget(user_id or default_user, message_ids, tenant=tenant)
        return {"deleted": deleted}

    return server


@contextmanager
def _as_tool_error() -> Iterator[None]:
    """The caller's mistakes become tool errors (shown to the model); anything else stays a bug."""
    try:
        yield
    except _CALLER_ERRORS as e:
        raise ToolError(str(e)) from e


def without_surrogates(line: bytes) -> bytes:
    """A JSON-RPC line whose strings hold no lone surrogate. JSON may escape one (`"\\ud800"`); the SDK's
    parser refuses such a line and the request goes unanswered. Each becomes a NUL, which the tools refuse
    as text that is not valid, so the caller gets a tool error instead of silence."""
    if b"\\u" not in line:
        return line
    try:
        message = json.loads(line)
    except ValueError:
        return line  # the SDK answers malformed JSON itself

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
    """`lazymem mcp [overrides]`: serve the tools over stdio until the client closes the pipe."""
    cfg = compose(overrides)
    memory = Memory.from_cfg(cfg)
    _guard_stdin()
    try:
        build_server(memory, cfg.mcp.tenant, cfg.mcp.user).run("stdio")
    finally:
        memory.close()
    return 0
