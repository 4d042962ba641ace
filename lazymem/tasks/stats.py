"""task=stats: what is in the selected data (questions per type, history sizes, evidence)."""

from __future__ import annotations

import json
from collections import Counter

from lazymem.data import load_dataset
from lazymem.numeric import describe
from lazymem.tasks.contract import Task
from lazymem.tokens import count_tokens


def run(cfg, run) -> dict:
    ds = load_dataset(cfg.data)
    run.meta.add_dataset(ds.source)
    histories = list(ds.histories.values())
    stats = {
        "dataset": ds.name,
        "questions": len(ds.questions),
        "by_type": dict(sorted(Counter(q.type for q in ds.questions).items())),
        "abstention": sum(q.abstention for q in ds.questions),
        "without_gold": sum(not q.gold_idx for q in ds.questions),
        "gold_messages_per_question": describe([len(q.gold_idx) for q in ds.questions]),
        "histories": len(histories),
        "sessions_per_history": describe([len(h.session_ids) for h in histories]),
        "messages_per_history": describe([len(h.messages) for h in histories]),
        "tokens_per_history": describe([sum(count_tokens(m.text) for m in h.messages) for h in histories]),
        "source": ds.source,
    }
    (run.dir / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    print(render(stats))
    return stats


def render(stats: dict) -> str:
    lines = [f"{stats['dataset']}: {stats['questions']} questions over {stats['histories']} histories", ""]
    lines += ["| question type | count |", "|---|---:|"]
    lines += [f"| {t} | {n} |" for t, n in stats["by_type"].items()]
    lines.append("")
    lines += ["| per history | mean | median | max |", "|---|---:|---:|---:|"]
    for key in ("sessions_per_history", "messages_per_history", "tokens_per_history"):
        d = stats[key]
        lines.append(
            f"| {key.removesuffix('_per_history')} | {d['mean']:.1f} | {d['median']:.0f} | {d['max']:.0f} |"
        )
    return "\n".join(lines)


TASK = Task(run)
