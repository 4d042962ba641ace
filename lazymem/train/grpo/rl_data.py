"""RL prompts for GRPO (paper Section 4.1, Appendix D.2 "RL data balancing").

The pool is every (query, window) pair of a split, windowed as at inference. Training prompts are
balanced 50/50 by whether the window holds gold evidence: gold-bearing windows are sampled WITH
replacement (they are rare: 8.98% in the paper), the others WITHOUT. Rows are VERL parquet rows
(`rl_rows.rl_row`) whose prompt is the memory model's own chat.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from lazymem.tokens import chat_tokens
from lazymem.train.grpo.rl_rows import rl_row
from lazymem.train.sft_data import WindowItem


def balance_pool(pool: Sequence[WindowItem], size: int, seed: int) -> tuple[list[WindowItem], dict]:
    """`size` prompts, half gold-bearing (with replacement), half not (without replacement), shuffled.

    With fewer non-gold windows than half of `size`, all of them are taken and the set is smaller;
    `short_of_nongold` says so. Without any gold-bearing window, only non-gold ones are taken.
    """
    gold = [it for it in pool if any(it.gold)]
    other = [it for it in pool if not any(it.gold)]
    rng = random.Random(seed)
    n_gold = size // 2 if gold else 0
    n_other = size - size // 2
    picked_gold = [rng.choice(gold) for _ in range(n_gold)]
    picked_other = rng.sample(other, min(n_other, len(other)))
    out = picked_gold + picked_other
    rng.shuffle(out)
    info = {
        "requested": size,
        "size": len(out),
        "gold_bearing": len(picked_gold),
        "non_gold": len(picked_other),
        "unique_gold_bearing": len({id(it) for it in picked_gold}),
        "short_of_nongold": len(other) < n_other,
        "no_gold_windows": not gold,
    }
    return out, info


def pair_pool(pool: Sequence[WindowItem], seed: int) -> tuple[list[WindowItem], dict]:
    """Every gold-bearing window once, plus as many gold-free ones sampled without replacement, shuffled.

    The validation set: balanced like the training set, but without repeating a window (App. E.1).
    """
    gold = [it for it in pool if any(it.gold)]
    other = [it for it in pool if not any(it.gold)]
    rng = random.Random(seed)
    picked_other = rng.sample(other, min(len(gold), len(other)))
    out = gold + picked_other
    rng.shuffle(out)
    info = {
        "size": len(out),
        "gold_bearing": len(gold),
        "non_gold": len(picked_other),
        "short_of_nongold": len(other) < len(gold),
        "no_gold_windows": not gold,
    }
    return out, info


def cap_pool(items: Sequence[WindowItem], n: int) -> list[WindowItem]:
    """At most `n` of a shuffled set, half gold-bearing where it has them, in the set's order: a smaller
    validation set with the same balance (a validation round on a CPU costs seconds per prompt)."""
    gold = [it for it in items if any(it.gold)][: n // 2]
    other = [it for it in items if not any(it.gold)][: n - len(gold)]
    keep = {id(it) for it in gold + other}
    return [it for it in items if id(it) in keep]


def fit_prompts(pool: Sequence[WindowItem], max_prompt_length: int) -> tuple[list[WindowItem], int]:
    """The windows whose prompt fits VERL's `data.max_prompt_length` (an upper token estimate), and how
    many did not: VERL stops on a longer prompt instead of skipping it."""
    kept = [it for it in pool if chat_tokens(it.chat) <= max_prompt_length]
    return kept, len(pool) - len(kept)


def pool_stats(pool: Sequence[WindowItem]) -> dict:
    n_gold = sum(1 for it in pool if any(it.gold))
    return {
        "questions": len({it.question.id for it in pool}),
        "windows": len(pool),
        "gold_bearing": n_gold,
        "gold_bearing_share": n_gold / len(pool) if pool else None,
    }


def rows(
    items: Sequence[WindowItem], split: str, query_times: dict[str, str], chains: dict[str, str | None]
) -> list[dict]:
    """VERL rows; extra_info carries the question id, its type and the window span, the ground truth the
    question's referenced reasoning chain (None without one)."""
    out = []
    for k, it in enumerate(items):
        q = it.question
        out.append(
            rl_row(
                prompt=it.chat,
                query=q.text,
                query_time=query_times[q.id],
                messages=it.messages,
                gold=it.gold,
                answer=q.answer,
                reasoning=chains.get(q.id),
                split=split,
                index=k,
                extra_info={
                    "question_id": q.id,
                    "question_type": q.type,
                    "window_start": it.window.start,
                    "window_end": it.window.end,
                    "gold_bearing": any(it.gold),
                },
            )
        )
    return out
