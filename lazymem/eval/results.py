"""results.md: the summary as Markdown tables (accuracy, memory tokens, latency, construction)."""

from __future__ import annotations


def _f(x, digits=2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def render_results(summary: dict) -> str:
    methods = summary["methods"]
    types = sorted({t for s in methods.values() for t in s["accuracy_by_type"]})
    lines = [f"## Accuracy ({summary.get('dataset')})", ""]
    lines.append(
        "LLM-judge accuracy; `contains ref`: share of short factual answers containing the reference."
    )
    lines.append("")
    lines.append(
        "| method | " + " | ".join(types) + " | overall | task-avg | abstention | contains ref | n | errors |"
    )
    lines.append("|---|" + "---:|" * (len(types) + 6))
    for name, s in methods.items():
        cells = [_f(s["accuracy_by_type"].get(t)) for t in types]
        lines.append(
            f"| {name} | "
            + " | ".join(cells)
            + f" | {_f(s['accuracy'])} | {_f(s['accuracy_task_averaged'])} | "
            f"{_f(s['abstention_accuracy'])} | {_f(s.get('contains_reference'))} | {s['judged']} | "
            f"{s['errors'] + s['judge_errors']} |"
        )
    lines += ["", "## Memory and construction", ""]
    lines.append(
        "| method | memory tokens (mean) | gold in memory | windows | gate format | gold kept | "
        "non-gold dropped |"
    )
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    for name, s in methods.items():
        c = s["construction"]
        lines.append(
            f"| {name} | {_f(s['memory_tokens']['mean'], 0)} | {_f(s['gold_recall_in_memory'])} | "
            f"{s['windows']} | {_f(s['gate_format_rate'], 3)} | {_f(c['gold_kept'])} | "
            f"{_f(c['nongold_dropped'])} |"
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
    llm = summary.get("llm") or {}
    if llm:
        lines += ["", "## LLM calls", "", "| role | calls | cache hits | errors |", "|---|---:|---:|---:|"]
        for role, st in llm.items():
            if isinstance(st, dict) and "calls" in st:
                lines.append(
                    f"| {role} | {st['calls']} | {st.get('cache_hits', 0)} | {st.get('errors', 0)} |"
                )
    return "\n".join(lines)
