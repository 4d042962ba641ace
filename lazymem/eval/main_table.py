"""The paper's main-table shapes (Tables 1, 7 and 8) from per-benchmark summaries, paper numbers beside ours.

Each cell reads `ours (paper)`; `–` where a number does not exist (a method the paper did not run, a
stage a method does not have, Oracle Session on LoCoMo).
"""

from __future__ import annotations

import json
from pathlib import Path

PAPER = Path(__file__).resolve().parents[2] / "experiments" / "main_table" / "paper.json"
STAGES = ("total", "retrieval", "processing", "answer")
STATS = ("mean", "median", "p90", "p95")


def load_paper(path: Path = PAPER) -> dict:
    return json.loads(Path(path).read_text())


def _num(x, digits: int) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _cell(ours, paper, digits: int = 2) -> str:
    return f"{_num(ours, digits)} ({_num(paper, digits)})" if paper is not None else _num(ours, digits)


def table1(bench: str, summary: dict, paper: dict) -> list[str]:
    rows = paper["table1_accuracy"]["rows"]
    methods = summary["methods"]
    types = sorted({t for s in methods.values() for t in s["accuracy_by_type"]})
    lines = [f"### Table 1 ({bench}): LLM-judge accuracy, ours (paper)", ""]
    lines += [
        "| method | " + " | ".join(types) + " | LJ | n | errors |",
        "|---|" + "---:|" * (len(types) + 3),
    ]
    for name, s in methods.items():
        ref = (rows.get(name) or {}).get(bench) or {}
        if s.get("not_applicable") and not s["questions"]:
            lines.append(f"| {name} | " + " | ".join("n/a" for _ in types) + " | n/a | 0 | 0 |")
            continue
        cells = [_cell(s["accuracy_by_type"].get(t), (ref.get("by_type") or {}).get(t)) for t in types]
        lj = _cell(s["accuracy"], ref.get("LJ"))
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {lj} | {s['judged']} | {s['errors']} |")
    return lines


def table7(summaries: dict, paper: dict) -> list[str]:
    rows = paper["table7_memory_tokens"]["rows"]
    benches = list(summaries)
    lines = ["### Table 7: answer-context memory tokens (mean per question), ours (paper)", ""]
    lines += ["| method | " + " | ".join(benches) + " |", "|---|" + "---:|" * len(benches)]
    names = list(dict.fromkeys(n for s in summaries.values() for n in s["methods"]))
    for name in names:
        cells = []
        for b in benches:
            s = summaries[b]["methods"].get(name)
            ours = s["memory_tokens"]["mean"] if s and s["ok"] else None
            cells.append(_cell(ours, (rows.get(name) or {}).get(b), 0))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def table8(bench: str, summary: dict, paper: dict) -> list[str]:
    ref_rows = paper["table8_latency_s"]["rows"] if paper["table8_latency_s"]["benchmark"] == bench else {}
    head = " | ".join(f"{stage} {stat}" for stage in STAGES for stat in STATS)
    lines = [f"### Table 8 ({bench}): latency in seconds, ours (paper)", ""]
    lines += [f"| method | {head} |", "|---|" + "---:|" * (len(STAGES) * len(STATS))]
    for name, s in summary["methods"].items():
        ref = ref_rows.get(name) or {}
        cells = []
        for stage in STAGES:
            d = s["latency_s"].get(stage) or {}
            stage_ref = ref.get(stage) or {}
            for stat in STATS:
                cells.append(_cell(d.get(stat) if d.get("n") else None, stage_ref.get(stat)))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def render(summaries: dict, paper: dict | None = None) -> str:
    paper = paper or load_paper()
    lines = ["## Main table", ""]
    for bench, summary in summaries.items():
        lines += table1(bench, summary, paper) + [""]
    lines += table7(summaries, paper) + [""]
    for bench, summary in summaries.items():
        lines += table8(bench, summary, paper) + [""]
    return "\n".join(lines).rstrip() + "\n"
