"""VERL parquet rows for GRPO on the memory model, and the ground truth the reward reads back.

A row (DESIGN.md, "VERL 0.9.1") is ``data_source``, ``prompt`` (a chat list), ``reward_model`` =
``{style, ground_truth}`` and ``extra_info`` = ``{split, index, ...}``. The ground truth is a JSON *string*:
parquet would otherwise force one struct schema over all rows and turn absent fields into nulls, while a
string round-trips exactly. The builder and the parser live together so the format has one definition.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lazymem.data.schema import Message

DATA_SOURCE = "lazymem"
REWARD_STYLE = "rule"


@dataclass(frozen=True)
class WindowTruth:
    """What the reward needs about one (query, window) prompt."""

    gold: tuple[bool, ...]  # one flag per window message, in window order
    query: str
    query_time: str | None
    messages: tuple[dict[str, str], ...]  # {role, content, timestamp}, same order as gold
    answer: str  # reference answer (the quality judge's utility evidence)
    reasoning: str | None = None  # referenced reasoning chain, when the data has one

    def __len__(self) -> int:
        return len(self.gold)


def window_message(message: Message | Mapping[str, Any]) -> dict[str, str]:
    """A window message as ``{role, content, timestamp}``, from a :class:`Message` or such a mapping."""
    if isinstance(message, Message):
        return {"role": message.role, "content": message.text, "timestamp": message.time}
    missing = [k for k in ("role", "content") if k not in message]
    if missing:
        raise ValueError(f"window message lacks {missing}: {dict(message)!r:.200}")
    return {
        "role": str(message["role"]),
        "content": str(message["content"]),
        "timestamp": "" if message.get("timestamp") is None else str(message["timestamp"]),
    }


def ground_truth_json(
    *,
    query: str,
    query_time: str | None,
    messages: Sequence[Message | Mapping[str, Any]],
    gold: Sequence[bool],
    answer: str,
    reasoning: str | None = None,
) -> str:
    """The ``reward_model.ground_truth`` string of one row (checked by reading it back)."""
    payload = {
        "gold": [bool(g) for g in gold],
        "query": query,
        "query_time": query_time,
        "messages": [window_message(m) for m in messages],
        "answer": answer,
        "reasoning": reasoning,
    }
    text = json.dumps(payload, ensure_ascii=False)
    read_ground_truth(text)
    return text


def read_ground_truth(ground_truth: str | Mapping[str, Any]) -> WindowTruth:
    """Parse and check a ground truth (JSON string or already-decoded mapping); ValueError when malformed."""
    data = json.loads(ground_truth) if isinstance(ground_truth, str) else ground_truth
    if not isinstance(data, Mapping):
        raise ValueError(f"ground truth is a JSON {type(data).__name__}, not an object")
    gold = data.get("gold")
    if not isinstance(gold, Sequence) or isinstance(gold, str) or not gold:
        raise ValueError("ground truth 'gold' must be a non-empty list of booleans")
    if not all(isinstance(g, bool) for g in gold):
        raise ValueError(f"ground truth 'gold' holds non-booleans: {list(gold)!r:.200}")
    messages = data.get("messages")
    if not isinstance(messages, Sequence) or isinstance(messages, str) or len(messages) != len(gold):
        got = len(messages) if isinstance(messages, Sequence) else type(messages).__name__
        raise ValueError(f"ground truth has {len(gold)} gold flags but messages is {got}")
    for key in ("query", "answer"):
        if not isinstance(data.get(key), str):
            raise ValueError(f"ground truth '{key}' must be a string")
    return WindowTruth(
        gold=tuple(gold),
        query=data["query"],
        query_time=data.get("query_time"),
        messages=tuple(window_message(m) for m in messages),
        answer=data["answer"],
        reasoning=data.get("reasoning"),
    )


def rl_row(
    *,
    prompt: Sequence[Mapping[str, str]],
    query: str,
    query_time: str | None,
    messages: Sequence[Message | Mapping[str, Any]],
    gold: Sequence[bool],
    answer: str,
    reasoning: str | None = None,
    split: str = "train",
    index: int = 0,
    data_source: str = DATA_SOURCE,
    extra_info: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One VERL parquet row for a (query, window) prompt.

    ``prompt`` is the memory model's chat (system + user, from the prompt builder); ``messages`` and
    ``gold`` are the window's messages and gold flags in window order. ``extra_info`` adds keys beside
    ``split`` and ``index`` (give every row the same keys: parquet stores one schema).
    """
    if len(messages) != len(gold):
        raise ValueError(f"{len(messages)} window messages but {len(gold)} gold flags")
    chat = [{"role": str(m["role"]), "content": str(m["content"])} for m in prompt]
    if not chat:
        raise ValueError("prompt is an empty chat")
    info = {"split": split, "index": int(index), **(extra_info or {})}
    return {
        "data_source": data_source,
        "prompt": chat,
        "reward_model": {
            "style": REWARD_STYLE,
            "ground_truth": ground_truth_json(
                query=query,
                query_time=query_time,
                messages=messages,
                gold=gold,
                answer=answer,
                reasoning=reasoning,
            ),
        },
        "extra_info": info,
    }
