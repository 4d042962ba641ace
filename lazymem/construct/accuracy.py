"""A window's KEEP/DROP decisions scored against its gold flags: per-category accuracy and the action
reward (paper Eq. 7). Training's GRPO reward (lazymem.train.grpo.reward) and inference-time gates
(lazymem.methods.extractive_gate) both score with it, so it lives with the decisions, before either stage."""

from __future__ import annotations

import re
from collections.abc import Sequence

from lazymem.construct.decisions import Decision

ETA = 0.915  # paper Table 15: the weight of gold retention
WORD = re.compile(r"\w+")


def category_accuracy(gold: Sequence[bool], ops: Sequence[str]) -> tuple[float | None, float | None]:
    """(A_g, A_n): share of gold messages kept, share of non-gold dropped; None for an absent category."""
    if len(gold) != len(ops):
        raise ValueError(f"{len(gold)} gold flags but {len(ops)} decisions")
    kept_gold = sum(1 for g, op in zip(gold, ops, strict=True) if g and op == "KEEP")
    dropped_non = sum(1 for g, op in zip(gold, ops, strict=True) if not g and op == "DROP")
    n_gold = sum(1 for g in gold if g)
    n_non = len(gold) - n_gold
    return (kept_gold / n_gold if n_gold else None, dropped_non / n_non if n_non else None)


def action_reward(a_gold: float | None, a_nongold: float | None, eta: float = ETA) -> float:
    """Eq. 7; a window holding only one category scores that category's accuracy."""
    if a_gold is None and a_nongold is None:
        raise ValueError("a window has at least one message")
    if a_gold is None:
        return a_nongold
    if a_nongold is None:
        return a_gold
    return eta * a_gold + (1.0 - eta) * a_nongold


def copied_words(decisions: Sequence[Decision], texts: Sequence[str]) -> tuple[int, int]:
    """(words of the KEEP contents found in the message each keeps, words of those contents), for a window's
    decisions and its messages' texts, case-folded. Gold kept only reads the ops: a model that learnt where
    to say KEEP but not to copy (SmolLM2-135M after one SFT epoch on three-message windows) scores well
    there while writing text of its own, which this shows."""
    found = total = 0
    for d, source in zip(decisions, texts, strict=True):
        if d.op != "KEEP":
            continue
        words, have = WORD.findall(d.content.lower()), set(WORD.findall(source.lower()))
        found += sum(w in have for w in words)
        total += len(words)
    return found, total
