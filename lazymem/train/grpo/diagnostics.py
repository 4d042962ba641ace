"""Reward-ordering diagnostic of the action reward (paper Appendix E.1, Table 11).

Input: rollouts, one JSONL line each: ``prompt_id``, ``gold`` (one bool per window message) and
``response`` (raw policy text). The format gate decides validity; only valid rollouts are used.

For each of three action rewards (micro: message-level accuracy, Eq. 10; symmetric: 0.5 A_g + 0.5 A_n,
Eq. 11; ours: eta A_g + (1 - eta) A_n, Eq. 12):

- conflict pair: two valid rollouts of the same prompt where one (o_g) has strictly higher A_g and
  strictly lower A_n than the other (o_n). Only windows holding both categories can form one.
- inversion: R(o_g) < R(o_n); tie: R(o_g) = R(o_n) (within ``tol``). Rates are pooled over all conflict
  pairs of all prompts, as Table 11 reports them.
- gold gap, our reading of "the mean reward difference between the best gold-retaining rollout and the
  best rollout that drops gold": per gold-bearing prompt, max R over valid rollouts that keep every gold
  message (A_g = 1) minus max R over valid rollouts that drop at least one (A_g < 1); averaged over the
  prompts that have rollouts of both kinds. Prompts without both kinds do not enter the mean.

For one-category windows (which enter only the gold gap) symmetric and ours use that category's accuracy,
as training does; micro needs no special case.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lazymem.construct.accuracy import ETA, action_reward
from lazymem.construct.decisions import check_decisions


@dataclass(frozen=True)
class Outcome:
    """One rollout's action counts (counts only make sense when ``valid``)."""

    prompt_id: str
    valid: bool
    n_gold: int
    n_nongold: int
    kept_gold: int = 0
    dropped_nongold: int = 0

    @property
    def a_gold(self) -> float | None:
        return self.kept_gold / self.n_gold if self.n_gold else None

    @property
    def a_nongold(self) -> float | None:
        return self.dropped_nongold / self.n_nongold if self.n_nongold else None


def outcome(record: Mapping[str, Any]) -> Outcome:
    """Gate one rollout record and count its correct decisions per category."""
    gold = [bool(g) for g in record["gold"]]
    n_gold = sum(gold)
    base = {"prompt_id": str(record["prompt_id"]), "n_gold": n_gold, "n_nongold": len(gold) - n_gold}
    gate = check_decisions(record["response"], len(gold))
    if not gate.ok:
        return Outcome(valid=False, **base)
    ops = [d.op for d in gate.decisions]
    kept = sum(1 for g, op in zip(gold, ops, strict=True) if g and op == "KEEP")
    dropped = sum(1 for g, op in zip(gold, ops, strict=True) if not g and op == "DROP")
    return Outcome(valid=True, kept_gold=kept, dropped_nongold=dropped, **base)


def micro_reward(o: Outcome) -> float:
    return (o.kept_gold + o.dropped_nongold) / (o.n_gold + o.n_nongold)


def rewards(eta: float = ETA) -> dict[str, Callable[[Outcome], float]]:
    return {
        "micro": micro_reward,
        "symmetric": lambda o: action_reward(o.a_gold, o.a_nongold, 0.5),
        "ours": lambda o: action_reward(o.a_gold, o.a_nongold, eta),
    }


def conflict_pairs(outcomes: list[Outcome]) -> list[tuple[Outcome, Outcome]]:
    """(o_g, o_n) for every unordered pair of valid rollouts in ``outcomes`` (one prompt) that conflict."""
    valid = [o for o in outcomes if o.valid and o.n_gold and o.n_nongold]
    pairs = []
    for i, x in enumerate(valid):
        for y in valid[i + 1 :]:
            if x.a_gold > y.a_gold and x.a_nongold < y.a_nongold:
                pairs.append((x, y))
            elif y.a_gold > x.a_gold and y.a_nongold < x.a_nongold:
                pairs.append((y, x))
    return pairs


def gold_gap(outcomes: list[Outcome], reward: Callable[[Outcome], float]) -> float | None:
    """Best gold-retaining minus best gold-dropping reward for one prompt; None without both kinds."""
    valid = [o for o in outcomes if o.valid and o.n_gold]
    keep_all = [reward(o) for o in valid if o.kept_gold == o.n_gold]
    drop_some = [reward(o) for o in valid if o.kept_gold < o.n_gold]
    if not keep_all or not drop_some:
        return None
    return max(keep_all) - max(drop_some)


def group(records: Iterable[Mapping[str, Any]]) -> dict[str, list[Outcome]]:
    """Outcomes by prompt; every rollout of a prompt must carry the same gold flags."""
    by_prompt: dict[str, list[Outcome]] = defaultdict(list)
    gold_of: dict[str, list[bool]] = {}
    for record in records:
        pid, gold = str(record["prompt_id"]), [bool(g) for g in record["gold"]]
        if gold_of.setdefault(pid, gold) != gold:
            raise ValueError(f"prompt {pid}: rollouts disagree on the gold flags")
        by_prompt[pid].append(outcome(record))
    return dict(by_prompt)


def reward_ordering(
    records: Iterable[Mapping[str, Any]], eta: float = ETA, tol: float = 1e-9
) -> dict[str, Any]:
    """Table 11 for ``records``: per reward, inversion and tie rate over conflict pairs, and gold gap."""
    by_prompt = group(records)
    all_outcomes = [o for group_ in by_prompt.values() for o in group_]
    pairs = [p for group_ in by_prompt.values() for p in conflict_pairs(group_)]
    table: dict[str, dict[str, float | None]] = {}
    for name, reward in rewards(eta).items():
        inv = sum(1 for og, on in pairs if reward(og) < reward(on) - tol)
        tie = sum(1 for og, on in pairs if abs(reward(og) - reward(on)) <= tol)
        gaps = [g for group_ in by_prompt.values() if (g := gold_gap(group_, reward)) is not None]
        table[name] = {
            "inversion": inv / len(pairs) if pairs else None,
            "tie": tie / len(pairs) if pairs else None,
            "gold_gap": math.fsum(gaps) / len(gaps) if gaps else None,
        }
    n_valid = sum(1 for o in all_outcomes if o.valid)
    return {
        "rewards": table,
        "n_rollouts": len(all_outcomes),
        "n_valid": n_valid,
        "format_rate": n_valid / len(all_outcomes) if all_outcomes else None,
        "n_prompts": len(by_prompt),
        "n_conflict_pairs": len(pairs),
        "n_gap_prompts": sum(1 for g in by_prompt.values() if gold_gap(g, micro_reward) is not None),
    }


def load_jsonl(path: str | Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def format_table(result: Mapping[str, Any]) -> str:
    def pct(v: float | None) -> str:
        return "  n/a" if v is None else f"{100 * v:5.1f}%"

    lines = [f"{'reward':<10} {'inversion':>9} {'tie':>7} {'gold gap':>8}"]
    for name, row in result["rewards"].items():
        gap = "n/a" if row["gold_gap"] is None else f"{row['gold_gap']:.3f}"
        lines.append(f"{name:<10} {pct(row['inversion']):>9} {pct(row['tie']):>7} {gap:>8}")
    lines.append(
        f"{result['n_valid']}/{result['n_rollouts']} valid rollouts, {result['n_prompts']} prompts, "
        f"{result['n_conflict_pairs']} conflict pairs, {result['n_gap_prompts']} prompts in the gold gap"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Reward-ordering diagnostic (paper Appendix E.1)")
    parser.add_argument("rollouts", help="JSONL: prompt_id, gold, response per line")
    parser.add_argument("--eta", type=float, default=ETA)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    result = reward_ordering(load_jsonl(args.rollouts), eta=args.eta)
    print(json.dumps(result, indent=2) if args.json else format_table(result))


if __name__ == "__main__":
    main()
