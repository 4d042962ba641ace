"""`lazymem mcp` driven by the MCP SDK's own stdio client: the server is a real subprocess speaking MCP."""

from __future__ import annotations

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters, stdio_client

from agent_helpers import ROOT


async def _session(tmp, calls):
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "lazymem.run", "mcp", "method=rag", f"agent.dir={tmp / 'data'}", f"paths.cache={tmp}/c"],
        cwd=str(ROOT),
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        return await calls(session)


def _result(reply) -> dict:
    assert not reply.is_error, reply.content
    return json.loads(reply.content[0].text)


def test_remember_recall_forget_over_stdio(tmp_path):
    async def calls(session):
        tools = {t.name for t in (await session.list_tools()).tools}
        assert tools == {"remember", "recall", "forget"}
        first = _result(await session.call_tool("remember", {"text": "My sister Ada lives in Oslo."}))
        _result(await session.call_tool("remember", {"text": "I prefer tea.", "time": "2025-03-01"}))
        other = _result(await session.call_tool("remember", {"text": "Bob's note", "user_id": "bob"}))
        found = _result(await session.call_tool("recall", {"question": "Where does Ada live?"}))
        assert "Oslo" in found["memory"] and found["tokens"] > 0
        assert first["ids"][0] in [m["id"] for m in found["messages"]]
        assert "Bob's note" not in found["memory"]  # another user's memory
        assert _result(await session.call_tool("forget", {"message_ids": first["ids"]})) == {"deleted": 1}
        assert "Oslo" not in _result(await session.call_tool("recall", {"question": "Ada?"}))["memory"]
        assert _result(await session.call_tool("forget", {})) == {"deleted": 1}
        gone = await session.call_tool("recall", {"question": "tea?"})
        assert gone.is_error and "unknown user" in gone.content[0].text
        bad = await session.call_tool("remember", {"text": "  "})
        assert bad.is_error and "text must be a non-empty string" in bad.content[0].text
        return other

    other = asyncio.run(_session(tmp_path, calls))
    assert len(other["ids"]) == 1
