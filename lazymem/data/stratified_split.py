"""The paper's stratified train/val/test split of LongMemEval (Appendix D.1, Table 9).

Per question type, questions are sorted by id and shuffled with a fixed seed; split sizes come from
sequential largest-remainder allocation: the train size over all types first, then the val size over
what is left, and test takes the rest. Remainders are compared exactly (fractions), ties going to the
type whose name sorts last. On the full 500-question file this reproduces Table 9 exactly
(360/40/100 overall; for example multi-session 96/10/27 but temporal-reasoning 96/11/26).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from fractions import Fraction

from lazymem.data.schema import Question

SPLITS = ("train", "val", "test")


def split_sizes(total: int, fractions: Sequence[float]) -> list[int]:
    """Overall split sizes by largest remainder (500 with 0.72/0.08/0.2 -> 360/40/100)."""
    shares = [Fraction(str(f)) for f in fractions]
    if sum(shares) != 1:
        raise ValueError(f"split fractions must sum to 1, got {list(fractions)}")
    exact = [total * s for s in shares]
    sizes = [int(x) for x in exact]
    order = sorted(range(len(exact)), key=lambda i: (exact[i] - sizes[i], -i), reverse=True)
    for i in order[: total - sum(sizes)]:
        sizes[i] += 1
    return sizes


def allocate(counts: dict[str, int], fractions: Sequence[float]) -> dict[str, list[int]]:
    """Per-type sizes for each split: {type: [n_train, n_val, n_test]}."""
    sizes = split_sizes(sum(counts.values()), fractions)
    left = dict(counts)
    result = {t: [] for t in counts}
    for size in sizes[:-1]:
        pool = sum(left.values())
        exact = {t: Fraction(size * n, pool) if pool else Fraction(0) for t, n in left.items()}
        take = {t: int(x) for t, x in exact.items()}
        ranked = sorted(left, key=lambda t: (exact[t] - take[t], t), reverse=True)
        for t in ranked[: size - sum(take.values())]:
            take[t] += 1
        for t in counts:
            result[t].append(take[t])
            left[t] -= take[t]
    for t in counts:
        result[t].append(left[t])
    return result


def make_split(questions: Sequence[Question], fractions: Sequence[float] = (0.72, 0.08, 0.2), seed: int = 42):
    """{"train": [ids], "val": [...], "test": [...]} and the per-type count table."""
    by_type: dict[str, list[str]] = {}
    for q in questions:
        by_type.setdefault(q.type, []).append(q.id)
    table = allocate({t: len(ids) for t, ids in by_type.items()}, fractions)
    split = {name: [] for name in SPLITS}
    for qtype in sorted(by_type):
        ids = sorted(by_type[qtype])
        random.Random(seed).shuffle(ids)
        start = 0
        for name, n in zip(SPLITS, table[qtype], strict=True):
            split[name].extend(ids[start : start + n])
            start += n
    return split, table


def count_table(table: dict[str, list[int]]) -> dict[str, dict[str, int]]:
    """The table as {type: {train, val, test, total}} plus a "total" row."""
    rows = {t: dict(zip(SPLITS, v, strict=True)) | {"total": sum(v)} for t, v in sorted(table.items())}
    totals = Counter()
    for row in rows.values():
        totals.update(row)
    rows["total"] = dict(totals)
    return rows
