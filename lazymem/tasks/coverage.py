"""task=coverage: All@n / Any@n per radius and question type, window statistics, retrieval cost.

    python -m lazymem.run task=coverage data=locomo data.path=FILE 'coverage.radii=[0,1,2,3]'

Writes coverage.json and coverage.md. Each history is indexed once (LoCoMo questions share one).
"""

from __future__ import annotations

import json

from hydra.utils import instantiate
from tqdm import tqdm

from lazymem.data import load_dataset
from lazymem.eval.coverage import aggregate, question_coverage
from lazymem.numeric import describe
from lazymem.preflight import require_placement
from lazymem.tasks.contract import Task


def run(cfg, run) -> dict:
    require_placement(cfg, [])
    ds = load_dataset(cfg.data)
    run.meta.add_dataset(ds.source)
    retriever = instantiate(cfg.retrieval)
    radii = [int(r) for r in cfg.coverage.radii]
    max_len, stride = int(cfg.coverage.max_len), int(cfg.coverage.stride)
    build_s: dict[str, float] = {}
    stage_s: dict[str, list[float]] = {s: [] for s in (*retriever.stages, "total")}
    rows: dict[int, list[dict]] = {r: [] for r in radii}
    excluded = 0
    for q in tqdm(ds.questions, desc="coverage", unit="q"):
        history = ds.history(q)
        index = retriever.index(history)
        build_s.setdefault(history.id, index.build_seconds)
        result = index.search(q.text)
        for stage, seconds in result.timings.items():
            stage_s.setdefault(stage, []).append(seconds)
        if not q.gold_idx:
            excluded += 1
            continue
        for r in radii:
            cov = question_coverage(result.indices, q.gold_idx, len(history.messages), r, max_len, stride)
            rows[r].append({"type": q.type, "history": history.id, "coverage": cov})
    report = {
        "dataset": ds.source.get("name"),
        "n": retriever.n,
        "questions": len(ds.questions),
        "excluded_without_gold": excluded,
        "radii": {str(r): aggregate(rows[r]) for r in radii},
        "retrieval": {
            "histories_indexed": len(build_s),
            "index_build_s": describe(list(build_s.values())),
            "query_s": {stage: _p50_p95(v) for stage, v in stage_s.items() if v},
        },
    }
    (run.dir / "coverage.json").write_text(json.dumps(report, indent=2) + "\n")
    md = render(report)
    (run.dir / "coverage.md").write_text(md + "\n")
    print(md)
    return report


def _p50_p95(values: list[float]) -> dict:
    d = describe(values)
    return {"p50": d["median"], "p95": d["p95"], "mean": d["mean"]}


def render(report: dict) -> str:
    n = report["n"]
    radii = report["radii"]
    types = sorted({t for agg in radii.values() for t in agg["by_type"]})
    lines = [
        f"## Evidence coverage ({report['dataset']}, n = {n}; {report['excluded_without_gold']} questions "
        "without gold excluded)",
        "",
    ]
    lines.append(
        f"| w | All@{n} | Any@{n} | " + " | ".join(types) + " | windows/q | with gold | msgs/window |"
    )
    lines.append("|---:|---:|---:|" + "---:|" * (len(types) + 3))
    for r, agg in radii.items():
        if not agg["questions"]:
            lines.append(f"| {r} | – | – |" + " – |" * (len(types) + 3))
            continue
        w = agg["windows"]
        per_type = [f"{agg['by_type'][t]['all_at_n']:.3f}" if t in agg["by_type"] else "–" for t in types]
        lines.append(
            f"| {r} | {agg['all_at_n']:.3f} | {agg['any_at_n']:.3f} | "
            + " | ".join(per_type)
            + f" | {w['per_question']:.1f} | {w['with_gold']:.3f} | {w['messages_per_window']:.1f} |"
        )
    spread = {r: agg["history_spread"] for r, agg in radii.items() if agg["questions"]}
    if spread:
        some = next(iter(spread.values()))
        lines += [
            "",
            f"All@{n} over the {some['histories']} histories (mean / std / min / max): "
            + "; ".join(
                f"w = {r}: {s['mean']:.3f} / {s['std']:.3f} / {s['min']:.3f} / {s['max']:.3f}"
                for r, s in spread.items()
            ),
        ]
    q = report["retrieval"]["query_s"]
    lines += [
        "",
        "Per-query retrieval latency, ms (p50 / p95): "
        + ", ".join(f"{stage} {1000 * d['p50']:.1f} / {1000 * d['p95']:.1f}" for stage, d in q.items()),
    ]
    b = report["retrieval"]["index_build_s"]
    lines.append(
        f"Index build: {report['retrieval']['histories_indexed']} histories, "
        f"{b['mean']:.2f} s mean, {b['max']:.2f} s max"
    )
    return "\n".join(lines)


TASK = Task(run)
