"""The memory processor's invalid-output policy, with a scripted stand-in for the LLM client."""

import asyncio
import json

import pytest

from lazymem.construct.processor import InvalidPolicy, MemoryProcessor, StageError
from lazymem.construct.windows import build_windows
from lazymem.data.schema import Message
from lazymem.llm.client import Completion
from lazymem.prompts import load

MESSAGES = [Message(i, "s", "2024/01/01 (Mon) 10:00", "user", f"message {i}") for i in range(12)]


def valid(n, keep=()):
    return json.dumps(
        [
            {
                "op": "KEEP" if i in keep else "DROP",
                "compressed_content": f"m{i}" if i in keep else "",
                "reason": "r",
            }
            for i in range(n)
        ]
    )


class Scripted:
    """Replies in order; records what was asked."""

    def __init__(self, *replies):
        self.replies, self.calls = list(replies), []

    async def chat(self, messages, **kw):
        self.calls.append(kw)
        text = self.replies.pop(0)
        if isinstance(text, Completion):
            return text
        return Completion(text=text, latency_s=0.01, attempts=1)


def run(client, policy=None, retrieved=(5,), radius=1):
    policy = policy or InvalidPolicy()
    proc = MemoryProcessor(client, load("memory_system"), load("memory_user"), policy)
    windows = build_windows(retrieved, len(MESSAGES), radius)
    return asyncio.run(proc.process("q?", "2024/02/01 (Thu) 10:00", windows, MESSAGES))


def test_valid_reply_passes_the_gate_with_the_window_schema():
    client = Scripted(valid(3, keep={1}))
    (w,) = run(client)
    assert w.outcome == "gate_ok" and w.gate_error is None
    assert [d.op for d in w.decisions] == ["DROP", "KEEP", "DROP"]
    schema = client.calls[0]["response_format"]["json_schema"]["schema"]
    assert schema["minItems"] == schema["maxItems"] == 3


def test_fenced_reply_is_salvaged_and_counted():
    (w,) = run(Scripted("```json\n" + valid(3) + "\n```"))
    assert w.outcome == "salvaged" and w.gate_error == "not_json" and w.calls == 1


def test_retry_then_fallback_raw_or_drop():
    (w,) = run(Scripted("nope", valid(3, keep={0})))
    assert w.outcome == "retried" and w.calls == 2 and w.decisions[0].op == "KEEP"
    client = Scripted("nope", "still nope")
    (w,) = run(client)
    assert w.outcome == "fallback" and [d.content for d in w.decisions] == [
        "message 4",
        "message 5",
        "message 6",
    ]
    assert client.calls[1]["sample"] == 1 and client.calls[1]["temperature"] == 0.7
    (w,) = run(Scripted("nope"), InvalidPolicy(salvage=False, retries=0, fallback="drop"))
    assert w.outcome == "fallback" and all(d.op == "DROP" for d in w.decisions) and w.calls == 1


def test_wrong_count_is_not_salvaged():
    (w,) = run(Scripted(valid(2), valid(2)))
    assert w.gate_error == "wrong_count" and w.outcome == "fallback"


def test_thinking_is_recorded_and_a_reply_cut_off_while_thinking_fails_the_gate():
    """The gate reads the reply as the model wrote it, whether the server split the thinking or not."""
    (w,) = run(Scripted(Completion(valid(3), reasoning="window 5 is small talk")))
    assert w.outcome == "gate_ok" and (w.thinking, w.raw) == ("window 5 is small talk", valid(3))
    cut = Completion("", reasoning="still weighing message 4", finish_reason="length")
    (w,) = run(Scripted(cut), PAPER)
    assert (w.outcome, w.gate_error, w.thinking) == ("invalid", "truncated", "still weighing message 4")


def test_api_failure_is_a_stage_error():
    with pytest.raises(StageError, match="memory model call failed"):
        run(Scripted(Completion(text="", error="HTTP 500 after 4 attempts")))


def test_all_windows_of_a_question_are_sent():
    client = Scripted(*[valid(3)] * 2)
    results = run(client, retrieved=(2, 9))
    assert [r.window.idx for r in results] == [(1, 2, 3), (8, 9, 10)] and len(client.calls) == 2
    with pytest.raises(ValueError):
        InvalidPolicy(fallback="keep-everything")


PAPER = InvalidPolicy(salvage=False, retries=0, fallback="none", structured=False)


def test_paper_policy_decodes_freely_and_an_invalid_window_contributes_nothing():
    client = Scripted("```json\n" + valid(3) + "\n```")
    (w,) = run(client, PAPER)
    assert client.calls[0]["response_format"] is None  # no schema-constrained decoding
    assert w.outcome == "invalid" and w.decisions is None and w.calls == 1  # no salvage, no retry
    assert w.to_record()["decisions"] is None and w.gate_error == "not_json"
    assert w.format_ok is True  # Table 3's Gate Fmt.: the reply contains the array, fenced
    (ok,) = run(Scripted(valid(3, keep={2})), PAPER)
    assert ok.outcome == "gate_ok" and ok.format_ok and ok.decisions[2].content == "m2"


def test_format_ok_is_table3s_looser_check_beside_the_strict_gate():
    # a blank KEEP fails the strict gate (empty_keep) but is still one decision per message
    loose = json.dumps([{"op": "KEEP", "compressed_content": " ", "reason": "r"}] + [{"op": "DROP"}] * 2)
    (w,) = run(Scripted(loose), PAPER)
    assert w.gate_error is not None and w.format_ok is True and w.outcome == "invalid"
    (short,) = run(Scripted(valid(2)), PAPER)
    assert short.gate_error == "wrong_count" and short.format_ok is False


def test_each_window_counts_the_kept_words_its_messages_hold():
    """Window 4-6: "message 5 copied" keeps 2 of its 3 words from "message 5", "Message 6" both of its."""
    reply = json.dumps(
        [
            {"op": "DROP", "compressed_content": "", "reason": "r"},
            {"op": "KEEP", "compressed_content": "message 5 copied", "reason": "r"},
            {"op": "KEEP", "compressed_content": "Message 6", "reason": "r"},
        ]
    )
    (w,) = run(Scripted(reply))
    assert w.outcome == "gate_ok" and w.to_record()["source_words"] == [4, 5]
    (raw,) = run(Scripted("no", "no"), InvalidPolicy(fallback="raw"))  # the raw window keeps every text
    assert raw.outcome == "fallback" and raw.to_record()["source_words"] == [6, 6]
    (none,) = run(Scripted("no", "no"), InvalidPolicy(fallback="none"))
    assert none.decisions is None and none.to_record()["source_words"] == [0, 0]
