"""The memory-processing model: one call per (question, window), all windows of a question at once.

Each reply goes through the format gate (`check_decisions`). What happens to a window whose reply fails
the gate is the configured policy (conf/construct/), applied in this order and counted per window:
  1. `salvage`: strip fences / take the first JSON array and check again (`salvage_decisions`);
  2. `retries`: ask again, `retries` times, with a new sample index at `retry_temperature`;
  3. `fallback`: `none` (the paper) lets the window contribute nothing, `raw` keeps every message of the
     window verbatim, `drop` decides DROP for each.
`structured` asks the server for JSON-schema-constrained decoding (our addition; the paper decodes freely).
A call that still fails at the API level after the client's retries is an error for the whole question.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lazymem.construct.accuracy import copied_words
from lazymem.construct.decisions import (
    Decision,
    check_decisions,
    decision_array_ok,
    decision_schema,
    salvage_decisions,
)
from lazymem.construct.render import render_window
from lazymem.construct.windows import Window
from lazymem.data.schema import Message
from lazymem.llm.client import json_schema_format
from lazymem.prompts import Template

FALLBACKS = ("none", "raw", "drop")


class StageError(RuntimeError):
    """An LLM call of a pipeline stage failed for good; the question is recorded as an error."""


@dataclass(frozen=True)
class InvalidPolicy:
    salvage: bool = True
    retries: int = 1
    retry_temperature: float = 0.7
    fallback: str = "raw"
    structured: bool = True

    def __post_init__(self):
        if self.fallback not in FALLBACKS:
            raise ValueError(f"fallback {self.fallback!r} not in {FALLBACKS}")

    @classmethod
    def from_config(cls, construct: Mapping[str, Any]) -> InvalidPolicy:
        """From a conf/construct/ config: `structured` plus the `invalid` block (missing keys: defaults)."""
        invalid = dict(construct.get("invalid") or {})
        if "structured" in construct:
            invalid["structured"] = construct["structured"]
        return cls(**invalid)


@dataclass
class WindowResult:
    window: Window
    decisions: list[Decision] | None  # None: the window contributes nothing
    outcome: str  # gate_ok | salvaged | retried | fallback | invalid (fallback none)
    gate_error: str | None  # the first reply's gate error (None when it passed)
    format_ok: bool  # the first reply passes Table 3's structural format check (`decision_array_ok`)
    raw: str  # the first reply, final text
    thinking: str
    calls: int
    latency_s: float
    cached: int
    tokens: dict = field(default_factory=dict)
    # (words of the KEEP contents found in the messages they keep, words of those contents): copied_words
    source_words: tuple[int, int] = (0, 0)

    def to_record(self) -> dict:
        return {
            "idx": list(self.window.idx),
            "core": list(self.window.core),
            "outcome": self.outcome,
            "gate_error": self.gate_error,
            "format_ok": self.format_ok,
            "decisions": self._decisions_record(),
            "raw": self.raw,
            "thinking": self.thinking,
            "calls": self.calls,
            "cached": self.cached,
            "latency_s": round(self.latency_s, 4),
            "tokens": self.tokens,
            "source_words": list(self.source_words),
        }

    def _decisions_record(self) -> list | None:
        return None if self.decisions is None else [[d.op, d.content, d.reason] for d in self.decisions]


class MemoryProcessor:
    def __init__(self, client, system: Template, user: Template, policy: InvalidPolicy):
        self.client, self.system, self.user, self.policy = client, system, user, policy
        self.prompt_version = f"{system.version}-{user.version}"

    def prompt(self, question_text: str, query_time: str, window: Window, messages: list[Message]) -> list:
        user = self.user.format(
            n_messages=len(window),
            query=question_text,
            query_time=query_time,
            window=render_window(window, messages),
        )
        return [{"role": "system", "content": self.system.text.strip()}, {"role": "user", "content": user}]

    async def process(
        self, question_text: str, query_time: str, windows: list[Window], messages: list[Message]
    ) -> list[WindowResult]:
        return list(
            await asyncio.gather(*(self._window(question_text, query_time, w, messages) for w in windows))
        )

    async def _window(self, question_text, query_time, window: Window, messages) -> WindowResult:
        n = len(window)
        chat = self.prompt(question_text, query_time, window, messages)
        fmt = None  # free decoding, as in the paper
        if self.policy.structured:
            fmt = json_schema_format(decision_schema(n), name="window_decisions")
        calls, latency, cached, tokens = 0, 0.0, 0, {"prompt": 0, "completion": 0}

        async def ask(sample: int, **decoding):
            nonlocal calls, latency, cached
            reply = await self.client.chat(
                chat, prompt_version=self.prompt_version, response_format=fmt, sample=sample, **decoding
            )
            calls += 1
            latency += reply.latency_s
            cached += int(reply.cached)
            tokens["prompt"] += reply.prompt_tokens
            tokens["completion"] += reply.completion_tokens
            if reply.error:
                raise StageError(
                    f"memory model call failed for window {window.idx[0]}-{window.idx[-1]}: {reply.error}"
                )
            return reply

        first = await ask(0)
        gate = check_decisions(first.generated, n)  # the gate reads the output as written, like RL's

        def result(decisions, outcome):
            return WindowResult(
                window,
                decisions,
                outcome,
                None if gate.ok else gate.error,
                decision_array_ok(first.generated, n),
                first.text,
                first.reasoning or "",
                calls,
                latency,
                cached,
                tokens,
                copied_words(decisions, [messages[i].text for i in window.idx]) if decisions else (0, 0),
            )

        if gate.ok:
            return result(gate.decisions, "gate_ok")
        if self.policy.salvage:
            salvaged = salvage_decisions(first.generated, n)
            if salvaged.ok:
                return result(salvaged.decisions, "salvaged")
        for k in range(self.policy.retries):
            again = await ask(k + 1, temperature=self.policy.retry_temperature)
            retry = check_decisions(again.generated, n)
            if not retry.ok and self.policy.salvage:
                retry = salvage_decisions(again.generated, n)
            if retry.ok:
                return result(retry.decisions, "retried")
        if self.policy.fallback == "none":
            return result(None, "invalid")
        if self.policy.fallback == "raw":
            keep = [Decision("KEEP", messages[i].text, "fallback: raw window") for i in window.idx]
        else:
            keep = [Decision("DROP", "", "fallback: dropped window") for _ in window.idx]
        return result(keep, "fallback")
