"""What one chat call gives back, with thinking and final text split once, here.

Every consumer reads ``Completion.text`` (the final answer) and ``Completion.reasoning`` (the thinking),
whether the server split them (vLLM's reasoning parser) or the content holds a ``<think>`` block
(llama.cpp, hosted APIs, cache entries written before the split lived here).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


def split_thinking(text: str) -> tuple[str, str]:
    """Separate a Qwen3-style thinking block from the final text; returns (thinking, final), stripped.

    Handles `<think>...</think>final`, a bare `...</think>final` (the chat template already opened the
    block in the prompt) and an unclosed `<think>...` (generation stopped while thinking: final is "").
    """
    head, sep, tail = text.partition("</think>")
    if sep:
        return head.strip().removeprefix("<think>").strip(), tail.strip()
    stripped = text.strip()
    if stripped.startswith("<think>"):
        return stripped.removeprefix("<think>").strip(), ""
    return "", stripped


def _has_thinking(text: str) -> bool:
    return "</think>" in text or text.lstrip().startswith("<think>")


@dataclass
class Completion:
    text: str  # the final answer, after any thinking
    reasoning: str | None = None  # the thinking; None when the model did not think
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0  # first send to final answer incl. retries and backoff; a hit keeps the original
    attempts: int = 0  # 0 for a cache hit
    cached: bool = False
    error: str | None = None
    # the model id the server answered with (its reply's `model`): a hosted alias such as deepseek-v4-pro
    # names a dated model that changes over time; None where the server named none, or for a cache entry
    # written before it was recorded
    model: str | None = None

    def __post_init__(self) -> None:
        if self.reasoning is None and _has_thinking(self.text):  # no reasoning parser on the server
            self.reasoning, self.text = split_thinking(self.text)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def generated(self) -> str:
        """The whole output as the model wrote it, thinking included: what the format gate reads (the same
        text an RL rollout gives). Thinking that ran out of tokens stays an unclosed ``<think>`` block."""
        if self.reasoning is None:
            return self.text
        if not self.text and self.finish_reason == "length":
            return f"<think>\n{self.reasoning}"
        return f"<think>\n{self.reasoning}\n</think>\n\n{self.text}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
