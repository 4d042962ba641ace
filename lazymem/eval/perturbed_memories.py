"""Controlled memory perturbations (paper Appendix E.1, Table 12): gold memory minus gold, plus non-gold.

Every variant is a set of verbatim messages, shown chronologically with the answer model's raw-memory
prompt:
- full_gold: the question's gold evidence messages (the reference every variant is paired with);
- drop_one_gold: full gold minus one gold message, once per gold message;
- drop_all_gold: no message at all;
- add_<k>_nongold: full gold plus k non-gold messages drawn at random from the local context, `samples`
  draws;
- add_all_nongold: full gold plus every non-gold message of the local context.
The local context is what the memory model is shown for the question: the top-n retrieved messages
expanded by the radius w (LazyMem's windows). A variant with several memories (deletions, random draws) is
averaged within the question first; confidence intervals then come from a question-level paired
bootstrap (paper: "Multiple deletions and random additions are first averaged within each question").
"""

from __future__ import annotations

import random
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from lazymem.construct.render import render_raw
from lazymem.data.schema import History
from lazymem.methods.base import MemoryBlock
from lazymem.numeric import bootstrap_ci, mean, paired_bootstrap

REFERENCE = "full_gold"


@dataclass(frozen=True)
class Variant:
    """One perturbed memory of one question: the variant's name, which draw or deletion, the messages."""

    name: str
    sample: int
    idx: tuple[int, ...]

    @property
    def key(self) -> str:
        """The record's `method` field (records.jsonl keys by method and question)."""
        return f"{self.name}/{self.sample}"

    def memory(self, history: History) -> MemoryBlock:
        return MemoryBlock(
            text=render_raw([history.messages[i] for i in self.idx]), style="raw", shown=list(self.idx)
        )


def variant_names(add: Sequence[int]) -> list[str]:
    """Table 12's rows in order."""
    return [
        REFERENCE,
        "drop_one_gold",
        "drop_all_gold",
        *(f"add_{k}_nongold" for k in add),
        "add_all_nongold",
    ]


def variants(
    gold: Sequence[int], pool: Sequence[int], add: Sequence[int], samples: int, seed: str
) -> list[Variant]:
    """Every perturbed memory of one question; `pool` = the non-gold messages of its local context.

    `seed` (e.g. the question id) makes the random additions reproducible per question. An addition larger
    than the pool takes the whole pool, once.
    """
    gold, pool = sorted(gold), sorted(set(pool) - set(gold))
    rng = random.Random(seed)
    out = [Variant(REFERENCE, 0, tuple(gold))]
    out += [Variant("drop_one_gold", k, tuple(g for g in gold if g != drop)) for k, drop in enumerate(gold)]
    out.append(Variant("drop_all_gold", 0, ()))
    for k in add:
        draws = 1 if k >= len(pool) else samples
        for s in range(draws):
            extra = pool if k >= len(pool) else rng.sample(pool, k)
            out.append(Variant(f"add_{k}_nongold", s, tuple(sorted([*gold, *extra]))))
    out.append(Variant("add_all_nongold", 0, tuple(sorted([*gold, *pool]))))
    return out


def per_question(records: list[dict], field: str) -> dict[str, dict[str, float]]:
    """variant -> question id -> the mean of `field` over that question's memories of the variant.

    Only answered and judged records count; a question whose every memory of a variant failed is absent.
    """
    values: dict[tuple[str, str], list] = defaultdict(list)
    for r in records:
        if r["status"] == "ok" and r.get("correct") is not None:
            values[(r["variant"], r["qid"])].append(r[field])
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for (variant, qid), xs in values.items():
        out[variant][qid] = mean(xs)
    return out


def summarize(records: list[dict], names: Sequence[str], resamples: int = 10000, seed: int = 0) -> dict:
    """Table 12 from the records: per variant accuracy, paired Δ vs full gold (95% CI), C→I, tokens.

    Accuracy, Δ and tokens are over the questions that have both full gold and the variant judged, so
    every row compares the same questions. C→I: among questions full gold answers correctly, the mean
    share of the variant's memories answered wrongly. `errors` counts the variant's memories whose answer
    or judge call failed (e.g. a +all non-gold memory past the answer model's context), `error_messages`
    says why, and `dropped` counts the questions the variant was run on but that its row leaves out.
    """
    correct = per_question(records, "correct")
    tokens = per_question(records, "input_tokens")
    memory_tokens = per_question(records, "memory_tokens")
    ref = correct.get(REFERENCE, {})
    failed = [r for r in records if r["status"] != "ok"]
    rows = {}
    for name in names:
        acc = {q: v for q, v in correct.get(name, {}).items() if q in ref}
        # one count per kind of error: the token counts a message names are left out
        errors = Counter(re.sub(r"\d{3,}", "N", r.get("error") or "") for r in failed if r["variant"] == name)
        flips = [1 - acc[q] for q in acc if ref[q] == 1]
        delta = paired_bootstrap(ref, acc, resamples, seed) if name != REFERENCE else None
        rows[name] = {
            "questions": len(acc),
            "accuracy": mean(acc.values()),
            "accuracy_ci": bootstrap_ci(list(acc.values()), resamples, seed),
            "delta": delta,
            "c_to_i": mean(flips) if name != REFERENCE else None,
            "c_to_i_questions": len(flips),
            "input_tokens": mean(tokens.get(name, {}).get(q) for q in acc),
            "memory_tokens": mean(memory_tokens.get(name, {}).get(q) for q in acc),
            "errors": errors.total(),
            "error_messages": dict(errors.most_common(3)),
            "dropped": len({r["qid"] for r in records if r["variant"] == name} - set(acc)),
        }
    return {
        "records": len(records),
        "errors": sum(r["status"] != "ok" for r in records),
        "unjudged": sum(r["status"] == "ok" and r.get("correct") is None for r in records),
        "questions": len({r["qid"] for r in records}),
        "variants": rows,
    }
