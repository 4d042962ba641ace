"""Evidence coverage after window expansion (paper Table 2, All@n) and window statistics (App. D.2).

For each question the top-n retrieved messages are expanded by radius w; All@n asks whether every gold
message lies in the expanded set, Any@n whether at least one does. Questions without gold evidence
(abstention, unresolved LoCoMo evidence) cannot be scored and are counted instead.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from lazymem.construct.windows import build_windows, expanded_indices


def question_coverage(
    retrieved: Sequence[int],
    gold: Sequence[int],
    n_messages: int,
    radius: int,
    max_len: int = 8,
    stride: int = 7,
) -> dict:
    """Coverage and window numbers for one question at one radius."""
    expanded = expanded_indices(retrieved, n_messages, radius)
    windows = build_windows(retrieved, n_messages, radius, max_len, stride)
    gold_set = set(gold)
    return {
        "all": gold_set <= expanded,
        "any": bool(gold_set & expanded),
        "windows": len(windows),
        "windows_with_gold": sum(bool(gold_set & set(w.idx)) for w in windows),
        "window_messages": sum(len(w) for w in windows),
        "window_gold_messages": sum(len(gold_set & set(w.idx)) for w in windows),
    }


def aggregate(rows: list[dict]) -> dict:
    """rows: {"type", "history", "coverage": question_coverage(...)} for questions that have gold evidence.

    `by_history` and its spread show how much a number depends on which conversations were sampled."""
    if not rows:
        empty = {"questions": 0, "all_at_n": None, "any_at_n": None, "by_type": {}, "windows": {}}
        return {**empty, "by_history": {}, "history_spread": None}
    by_type: dict[str, list[dict]] = defaultdict(list)
    by_history: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_type[row["type"]].append(row["coverage"])
        by_history[row["history"]].append(row["coverage"])
    per_history = [_rate(c, "all") for c in by_history.values()]
    covs = [row["coverage"] for row in rows]
    total_windows = sum(c["windows"] for c in covs)
    total_messages = sum(c["window_messages"] for c in covs)
    return {
        "questions": len(covs),
        "all_at_n": _rate(covs, "all"),
        "any_at_n": _rate(covs, "any"),
        "by_type": {
            t: {"questions": len(c), "all_at_n": _rate(c, "all"), "any_at_n": _rate(c, "any")}
            for t, c in sorted(by_type.items())
        },
        "by_history": {h: {"questions": len(c), "all_at_n": _rate(c, "all")} for h, c in by_history.items()},
        "history_spread": {
            "histories": len(per_history),
            "mean": float(np.mean(per_history)),
            "std": float(np.std(per_history)),
            "min": min(per_history),
            "max": max(per_history),
        },
        "windows": {
            "per_question": total_windows / len(covs),
            "with_gold": sum(c["windows_with_gold"] for c in covs) / total_windows if total_windows else None,
            "messages_per_window": total_messages / total_windows if total_windows else None,
            "gold_message_share": (
                sum(c["window_gold_messages"] for c in covs) / total_messages if total_messages else None
            ),
        },
    }


def _rate(covs: list[dict], key: str) -> float:
    return sum(c[key] for c in covs) / len(covs)
