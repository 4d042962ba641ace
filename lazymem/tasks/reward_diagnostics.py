"""task=reward_diagnostics: the reward-ordering diagnostic (paper Appendix E.1, Table 11) on a rollout file.

Input `diagnostics.rollouts=FILE` (JSONL: prompt_id, gold, response per line; see
lazymem/train/grpo/diagnostics.py). Writes reward_diagnostics.json and reward_diagnostics.md.
Run with +experiment=reward_diagnostics diagnostics.rollouts=FILE.
"""

from __future__ import annotations

import json
from pathlib import Path

from lazymem.tasks.contract import Task
from lazymem.train.grpo.diagnostics import ETA, load_jsonl, reward_ordering

NAMES = {"micro": "Micro (Eq. 10)", "symmetric": "Symmetric (Eq. 11)", "ours": "Ours (Eq. 12)"}


def markdown(result: dict) -> str:
    """A Table 11-style Markdown table: inversion and tie rates over conflict pairs, and the gold gap."""

    def pct(v):
        return "n/a" if v is None else f"{100 * v:.1f}%"

    lines = ["| Reward | Inversion | Tie | Gold gap |", "|---|---:|---:|---:|"]
    for key, row in result["rewards"].items():
        gap = "n/a" if row["gold_gap"] is None else f"{row['gold_gap']:.3f}"
        lines.append(f"| {NAMES.get(key, key)} | {pct(row['inversion'])} | {pct(row['tie'])} | {gap} |")
    lines.append("")
    lines.append(
        f"{result['n_valid']}/{result['n_rollouts']} valid rollouts (format rate "
        f"{pct(result['format_rate'])}), {result['n_prompts']} prompts, {result['n_conflict_pairs']} "
        f"conflict pairs, {result['n_gap_prompts']} prompts in the gold gap."
    )
    return "\n".join(lines) + "\n"


def run(cfg, run) -> dict:
    opts = cfg.get("diagnostics") or {}
    path = opts.get("rollouts")
    if not path:
        raise SystemExit("error: set diagnostics.rollouts=FILE (JSONL: prompt_id, gold, response)")
    if not Path(path).exists():
        raise SystemExit(f"error: no such rollout file: {path}")
    eta = float(opts.get("eta") or ETA)
    result = {"rollouts": str(Path(path).resolve()), "eta": eta, **reward_ordering(load_jsonl(path), eta=eta)}
    (run.dir / "reward_diagnostics.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    table = markdown(result)
    (run.dir / "reward_diagnostics.md").write_text(table, encoding="utf-8")
    print(table)
    return result


TASK = Task(run)
