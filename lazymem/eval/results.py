"""results.md: one benchmark's summary as Markdown tables (accuracy, memory tokens, latency, construction)."""

from __future__ import annotations

from lazymem.eval.judge import describe_judge
from lazymem.eval.summary import BenchmarkSummary


def _metrics(methods: dict) -> list[str]:
    """The model-free metrics in the summaries (e.g. LoCoMo's f1), by their `<name>_by_type` keys."""
    names = {k.removesuffix("_by_type") for s in methods.values() for k in s if k.endswith("_by_type")}
    return sorted(names - {"accuracy"})


def _metric_table(metric: str, methods: dict) -> list[str]:
    types = sorted({t for s in methods.values() for t in s.get(f"{metric}_by_type") or {}})
    lines = ["", f"## {metric} (model-free, every question; a failed question scores as an empty answer)", ""]
    lines.append(_row(["method", *types, "overall"]))
    lines.append("|---|" + "---:|" * (len(types) + 1))
    for name, s in methods.items():
        by_type = s.get(f"{metric}_by_type") or {}
        lines.append(_row([name, *(_f(by_type.get(t)) for t in types), _f(s.get(metric))]))
    return lines


def _row(cells) -> str:
    """One Markdown table row; right for any number of cells, none of the per-type ones included."""
    return "| " + " | ".join(cells) + " |"


def _f(x, digits=2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def render_results(summary: BenchmarkSummary, llm: dict | None = None) -> str:
    """The benchmark's tables; `llm` (the run's LLM call stats) adds a table of calls per role."""
    methods = summary["methods"]
    types = sorted({t for s in methods.values() for t in s["accuracy_by_type"]})
    lines = [f"## Accuracy ({summary.get('dataset')})", ""]
    lines.append(
        "LJ: LLM-judge accuracy over all n questions (a failed question or a judge reply without a label "
        "counts as wrong); LJ judged: over the judged questions only; errors: failed questions plus "
        "unlabelled judge replies; `contains ref`: share of short factual answers containing the reference."
    )
    lines += ["", describe_judge(summary.get("judge")) + ".", ""]
    overall = ["LJ", "task-avg", "abstention", "LJ judged", "contains ref", "n", "judged", "errors"]
    lines.append(_row(["method", *types, *overall]))
    lines.append("|---|" + "---:|" * (len(types) + len(overall)))
    for name, s in methods.items():
        cells = [_f(s["accuracy_by_type"].get(t)) for t in types]
        cells += [_f(s["accuracy"]), _f(s["accuracy_task_averaged"]), _f(s["abstention_accuracy"])]
        cells += [_f(s.get("accuracy_judged")), _f(s.get("contains_reference"))]
        cells += [str(s["questions"]), str(s["judged"]), str(s["errors"] + s["judge_errors"])]
        lines.append(_row([name, *cells]))
    for metric in _metrics(methods):
        lines += _metric_table(metric, methods)
    lines += ["", "## Memory and construction", ""]
    lines.append(
        "| method | memory tokens (mean) | gold in memory | windows | format (Table 3) | strict gate | "
        "gold kept | non-gold dropped | kept words in source |"
    )
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, s in methods.items():
        c = s["construction"]
        lines.append(
            f"| {name} | {_f(s['memory_tokens']['mean'], 0)} | {_f(s['gold_recall_in_memory'])} | "
            f"{s['windows']} | {_f(s.get('format_rate_table3'), 3)} | {_f(s['gate_format_rate'], 3)} | "
            f"{_f(c['gold_kept'])} | "
            f"{_f(c['nongold_dropped'])} | {_f(c['kept_words_in_source'])} |"
        )
    lines += ["", "## Latency (s): mean / median / p90 / p95", ""]
    stages = ("retrieval", "processing", "answer", "total")
    lines.append("| method | " + " | ".join(stages) + " |")
    lines.append("|---|" + "---:|" * len(stages))
    for name, s in methods.items():
        cells = []
        for st in stages:
            d = s["latency_s"][st]
            cells.append("–" if not d["n"] else "/".join(_f(d[k]) for k in ("mean", "median", "p90", "p95")))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if llm:
        lines += ["", "## LLM calls", "", "| role | served by | calls | cache hits | errors |"]
        lines.append("|---|---|---:|---:|---:|")
        for role, st in llm.items():
            if isinstance(st, dict) and "calls" in st:
                by = st.get("server") or {}
                served = f"{by.get('kind', '?')}: {by.get('served_name', '?')}" if by else "–"
                counts = f"{st['calls']} | {st.get('cache_hits', 0)} | {st.get('errors', 0)}"
                lines.append(f"| {role} | {served} | {counts} |")
    return "\n".join(lines)
