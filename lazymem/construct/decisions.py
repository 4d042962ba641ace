"""The memory model's per-window output: one KEEP/DROP decision per message, and its format gate.

`check_decisions` is the single strict gate (paper Eq. 6, the set V): inference, SFT filtering and the
RL reward all call it, so "valid" means the same thing everywhere. `decision_array_ok` is Table 3's looser
"Gate Fmt.", which only asks that the reply contain the decision array. `salvage_decisions` is a lenient
fallback for inference only; callers count its successes separately and the RL reward never uses it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lazymem.construct.windows import Window
from lazymem.llm.completion import split_thinking

OPS = ("KEEP", "DROP")
FIELDS = ("op", "compressed_content", "reason")

# Every error code the gates can return, and what it means.
ERROR_CODES: dict[str, str] = {
    "empty": "no final text (nothing, or only a thinking block)",
    "not_json": "the final text does not start with a JSON value",
    "truncated": "the JSON (or the thinking block) ends before it is complete",
    "trailing_text": "a complete JSON value followed by more text",
    "not_array": "the JSON value is not an array",
    "wrong_count": "the array does not hold exactly one item per window message",
    "not_object": "an item is not a JSON object",
    "missing_field": "an item lacks op, compressed_content or reason",
    "extra_field": "an item has a field other than the three, or a field twice",
    "bad_type": "a field value is not a string",
    "bad_op": "op is not exactly KEEP or DROP",
    "empty_keep": "a KEEP item's compressed_content is blank",
    "nonempty_drop": "a DROP item's compressed_content is not the empty string",
}


@dataclass(frozen=True)
class Decision:
    op: str  # "KEEP" or "DROP"
    content: str  # the compressed message for KEEP, "" for DROP
    reason: str


@dataclass(frozen=True)
class GateResult:
    ok: bool
    decisions: list[Decision] | None = None
    error: str | None = None  # one of ERROR_CODES when not ok
    detail: str = ""  # human-readable, names the item index when one is at fault


def _fail(error: str, detail: str = "") -> GateResult:
    assert error in ERROR_CODES, error
    return GateResult(ok=False, error=error, detail=detail)


def _duplicate_checking_object(pairs: list[tuple[str, object]]) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        # Marker that survives json.loads; a plain dict would silently keep the last value.
        return {"__duplicate_keys__": sorted({k for k in keys if keys.count(k) > 1})}
    return dict(pairs)


def _decode(final: str, start: int = 0, strict: bool = True) -> tuple[object, int]:
    # strict=False admits raw newlines inside strings (llama.cpp's JSON grammar lets them through)
    decoder = json.JSONDecoder(object_pairs_hook=_duplicate_checking_object, strict=strict)
    return decoder.raw_decode(final, start)


def _is_truncation(err: json.JSONDecodeError) -> bool:
    return err.pos >= len(err.doc.rstrip()) or err.msg.startswith("Unterminated string")


def check_items(items: object, n: int) -> GateResult:
    """The schema checks on a decoded JSON value: an array of exactly `n` well-formed decisions."""
    if not isinstance(items, list):
        return _fail("not_array", f"got a JSON {type(items).__name__}")
    if len(items) != n:
        return _fail("wrong_count", f"expected {n} items, got {len(items)}")
    decisions = []
    for k, item in enumerate(items):
        if not isinstance(item, dict):
            return _fail("not_object", f"item {k} is a JSON {type(item).__name__}")
        if "__duplicate_keys__" in item:
            return _fail("extra_field", f"item {k} repeats {item['__duplicate_keys__']}")
        missing = [f for f in FIELDS if f not in item]
        if missing:
            return _fail("missing_field", f"item {k} lacks {missing}")
        extra = sorted(set(item) - set(FIELDS))
        if extra:
            return _fail("extra_field", f"item {k} has {extra}")
        for f in FIELDS:
            if not isinstance(item[f], str):
                return _fail("bad_type", f"item {k} field {f} is {type(item[f]).__name__}, not a string")
        op, content = item["op"], item["compressed_content"]
        if op not in OPS:
            return _fail("bad_op", f"item {k} op is {op!r}")
        if op == "KEEP" and not content.strip():
            return _fail("empty_keep", f"item {k} keeps blank content")
        if op == "DROP" and content != "":
            return _fail("nonempty_drop", f"item {k} drops with content {content[:40]!r}")
        decisions.append(Decision(op=op, content=content, reason=item["reason"]))
    return GateResult(ok=True, decisions=decisions)


def check_decisions(text: str, n: int) -> GateResult:
    """The strict format gate: after any thinking block, exactly one JSON array of `n` decisions."""
    if text is None or not text.strip():
        return _fail("empty")
    _, final = split_thinking(text)
    if not final:
        if "</think>" not in text:
            return _fail("truncated", "the <think> block is never closed")
        return _fail("empty", "nothing after the thinking block")
    try:
        value, end = _decode(final)
    except json.JSONDecodeError as err:
        if final[0] in "[{" and _is_truncation(err):
            return _fail("truncated", f"JSON ends early: {err.msg} at char {err.pos}")
        return _fail("not_json", f"{err.msg} at char {err.pos}")
    if end != len(final):
        return _fail("trailing_text", f"{len(final) - end} characters after the JSON value")
    return check_items(value, n)


def decision_array_ok(text: str, n: int) -> bool:
    """Table 3's "Gate Fmt." as the paper defines it: the final text *contains* a parseable JSON array
    holding exactly one decision (an object whose op is KEEP or DROP) per input message. An array inside a
    ```json fence or after a line of prose counts. Structural compliance only: the strict gate
    (`check_decisions`, Eq. 6's set V) also wants the whole final text to be that array, and checks the
    fields, their types and the KEEP/DROP content rules."""
    _, final = split_thinking(text or "")
    for start in (m.start() for m in re.finditer(r"\[", final)):
        try:
            value, _ = json.JSONDecoder().raw_decode(final, start)  # parseable as json.loads parses
        except json.JSONDecodeError:
            continue
        if (
            isinstance(value, list)
            and len(value) == n
            and all(isinstance(item, dict) and item.get("op") in OPS for item in value)
        ):
            return True
    return False


_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?|```")


def _first_array(text: str) -> tuple[object | None, bool]:
    """The first complete JSON array of objects in `text`, else the first complete array, else None.

    Also says whether scanning stopped at an array that runs to the end of the text (truncation).
    """
    first_any = None
    for match in re.finditer(r"\[", text):
        try:
            value, _ = _decode(text, match.start(), strict=False)
        except json.JSONDecodeError as err:
            if text[match.start() :].lstrip("[ \t\r\n")[:1] in "{]" and _is_truncation(err):
                return None, True  # everything after lies inside the cut array
            continue
        if value and all(isinstance(v, dict) for v in value):
            return value, False
        if first_any is None:
            first_any = value
    return first_any, False


def _normalise(item: object) -> object:
    if not isinstance(item, dict):
        return item
    item = dict(item)
    if isinstance(item.get("op"), str):
        item["op"] = item["op"].strip().upper()
    if item.get("op") == "DROP" and item.get("compressed_content", "") is None:
        item["compressed_content"] = ""
    return item


def salvage_decisions(text: str, n: int) -> GateResult:
    """Lenient fallback for inference: recover a decision array the strict gate rejects.

    Strips markdown code fences, takes the first complete JSON array in the text (preferring one of
    objects), upper-cases op and reads a null DROP content as "", then applies the strict item checks.
    A truncated array is not repaired.
    """
    strict = check_decisions(text, n)
    if strict.ok or text is None:
        return strict
    _, final = split_thinking(text)
    value, truncated = _first_array(_FENCE.sub("\n", final))
    if truncated:
        return _fail("truncated", "the decision array is cut off")
    if value is None:
        return strict
    return check_items([_normalise(v) for v in value], n)


def decision_schema(n: int) -> dict:
    """JSON Schema for structured decoding of one window's output (`n` messages).

    It pins the shape only; blank KEEP content and non-empty DROP content are left to the gate.
    """
    if n < 1:
        raise ValueError(f"a window has at least one message, got n={n}")
    return {
        "type": "array",
        "minItems": n,
        "maxItems": n,
        "items": {
            "type": "object",
            "properties": {
                "op": {"type": "string", "enum": list(OPS)},
                "compressed_content": {"type": "string"},
                "reason": {"type": "string"},
            },
            "required": list(FIELDS),
            "additionalProperties": False,
        },
    }


def merge_decisions(
    windows: Sequence[Window], decisions: Sequence[list[Decision] | None]
) -> dict[int, Decision]:
    """One decision per message index over all windows (paper Section 3.2).

    Overlapping sub-windows may decide the same message twice: KEEP beats DROP, and between equal ops
    the earlier window wins. A window whose output failed the gate (None) contributes nothing.
    """
    if len(windows) != len(decisions):
        raise ValueError(f"{len(windows)} windows but {len(decisions)} decision lists")
    merged: dict[int, Decision] = {}
    for window, window_decisions in zip(windows, decisions, strict=True):
        if window_decisions is None:
            continue
        if len(window_decisions) != len(window):
            raise ValueError(
                f"window {window.idx} has {len(window)} messages, {len(window_decisions)} decisions"
            )
        for i, decision in zip(window.idx, window_decisions, strict=True):
            seen = merged.get(i)
            if seen is None or (seen.op == "DROP" and decision.op == "KEEP"):
                merged[i] = decision
    return merged


def kept_content(merged: Mapping[int, Decision]) -> dict[int, str]:
    """The compressed content of the KEEP decisions, by message index (input to render_memory)."""
    return {i: d.content for i, d in sorted(merged.items()) if d.op == "KEEP"}
