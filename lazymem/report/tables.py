"""The paper's tables (1, 2, 3, 7, 8) from collected rows, as Markdown and CSV, paper numbers beside ours.

Markdown cells read `ours (paper)`; CSV files keep both as separate columns (`X` and `X_paper`). Paper
numbers are looked up by benchmark and method name; `aliases` maps a run's method name to the paper's
(e.g. {"lazymem": "lazymem_4b"}). Table 2's paper rows (a LazyMem-4B ablation) sit beside every LazyMem
variant; Table 3's beside runs whose config carries a `stage` label (base / sft / rl).
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

from lazymem.eval.judge import describe_judge
from lazymem.experiments import EXPERIMENTS_DIR
from lazymem.numeric import bootstrap_ci, paired_bootstrap
from lazymem.report.costs import not_run, not_run_note

PAPER = EXPERIMENTS_DIR  # the paper's numbers, one file per experiment
STAGES = ("total", "retrieval", "processing", "answer")
STATS = ("mean", "median", "p90", "p95")
STAGE_ORDER = ("base", "sft", "rl")


def load_references() -> dict:
    """Paper numbers of Tables 1, 7, 8 (main table), 2 (radius), 3 (training stages), 5/6, 11 and 12."""
    ref = json.loads((PAPER / "main_table.json").read_text())
    for sub in ("radius_ablation", "stage_ablation", "nanomemory_depth", "reward_rollouts", "perturbation"):
        path = PAPER / f"{sub}.json"
        if path.is_file():
            ref.update({k: v for k, v in json.loads(path.read_text()).items() if k.startswith("table")})
    return ref


@dataclass
class Cell:
    ours: float | None
    paper: float | None = None
    digits: int = 2

    def md(self) -> str:
        ours = "–" if self.ours is None else f"{self.ours:.{self.digits}f}"
        return ours if self.paper is None else f"{ours} ({self.paper:.{self.digits}f})"


@dataclass
class Table:
    key: str  # file stem
    title: str
    keys: list[str]  # label columns
    values: list[str]  # numeric columns
    rows: list[tuple[list, list[Cell]]] = field(default_factory=list)
    note: str = ""

    def markdown(self) -> str:
        lines = [f"### {self.title}", ""]
        if self.note:
            lines += [self.note, ""]
        lines.append("| " + " | ".join(self.keys + self.values) + " |")
        lines.append("|" + "---|" * len(self.keys) + "---:|" * len(self.values))
        for labels, cells in self.rows:
            lines.append("| " + " | ".join([_label(x) for x in labels] + [c.md() for c in cells]) + " |")
        return "\n".join(lines)

    def csv(self) -> str:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(self.keys + [h for v in self.values for h in (v, f"{v}_paper")])
        for labels, cells in self.rows:
            writer.writerow(list(labels) + [x for c in cells for x in (_num(c.ours), _num(c.paper))])
        return buf.getvalue()


def _label(x) -> str:
    return "–" if x is None else str(x).replace("|", "\\|")


def _num(x) -> str:
    return "" if x is None else f"{x:.6g}"


def _benchmarks(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["benchmark"] for r in rows))


def _multi_run(rows: list[dict]) -> bool:
    return len({r["run"] for r in rows}) > 1


def _ref_name(method: str, aliases: dict) -> str:
    return aliases.get(method, method)


def _not_run(ref: dict) -> list[tuple[str, str]]:
    """(paper method name, table label) of the systems the paper reports and lazymem does not run."""
    labels = ref.get("methods") or {}
    return [
        (name, f"{(labels.get(name) or {}).get('label', name)} (paper-reported, not run)")
        for name in not_run()
    ]


CI_NOTE = "CI: 95% question-level bootstrap (seeded)"


def ci_cells(r: dict) -> list[Cell]:
    """LJ's 95% bootstrap interval over the row's questions (low, high)."""
    ci = bootstrap_ci(list((r.get("correct") or {}).values()))
    return [Cell(ci["low"]), Cell(ci["high"])]


def _delta_cells(r: dict, base: dict) -> list[Cell]:
    """LJ minus the reference row's, paired by question, with its 95% interval; blank on the reference."""
    if r is base:
        return [Cell(None)] * 3
    d = paired_bootstrap(base.get("correct") or {}, r.get("correct") or {})
    return [Cell(d["mean"]), Cell(d["low"]), Cell(d["high"])]


def table1(rows: list[dict], ref: dict, aliases: dict) -> list[Table]:
    paper = ref["table1_accuracy"]["rows"]
    tables = []
    for bench in _benchmarks(rows):
        sub = [r for r in rows if r["benchmark"] == bench]
        types = sorted({t for r in sub for t in r["accuracy_by_type"]})
        multi = _multi_run(rows)
        keys = (["run"] if multi else []) + ["method", "n", "judged", "errors"]
        f1 = any(r.get("f1") is not None for r in sub)  # LoCoMo's own token F1, beside the judge
        values = types + ["LJ", "LJ CI low", "LJ CI high", "LJ judged"] + (["F1"] if f1 else [])
        t = Table(f"table1_{bench}", f"Table 1 ({bench}): LLM-judge accuracy, ours (paper)", keys, values)
        judges = dict.fromkeys(describe_judge(r.get("judge")) for r in sub)
        t.note = (
            "LJ over all n questions (a failed question counts as wrong, as in the paper); LJ judged: over "
            "the judged ones; errors: failed questions"
            + ("; F1: token F1, every question" if f1 else "")
            + f"; {CI_NOTE}. "
            + "; ".join(judges)
        )
        for r in sub:
            p = (paper.get(_ref_name(r["method"], aliases)) or {}).get(bench) or {}
            by_type = p.get("by_type") or {}
            cells = [Cell(r["accuracy_by_type"].get(ty), by_type.get(ty)) for ty in types]
            cells += [Cell(r["accuracy"], p.get("LJ")), *ci_cells(r), Cell(r.get("accuracy_judged"))]
            cells += [Cell(r.get("f1"))] if f1 else []
            labels = [r["method"], r["questions"], r["judged"], r["errors"]]
            t.rows.append(([r["run"], *labels] if multi else labels, cells))
        for name, label in _not_run(ref):
            p = (paper.get(name) or {}).get(bench) or {}
            by_type = p.get("by_type") or {}
            cells = [Cell(None, by_type.get(ty)) for ty in types] + [Cell(None, p.get("LJ"))]
            cells += [Cell(None)] * (3 + f1)
            labels = [label, None, None, None]
            t.rows.append(([None, *labels] if multi else labels, cells))
        t.note += ". " + not_run_note()
        tables.append(t)
    return tables


def _is_lazymem(method: str, aliases: dict) -> bool:
    return _ref_name(method, aliases).startswith("lazymem")


def table2(rows: list[dict], ref: dict, aliases: dict) -> Table | None:
    """Accuracy and All@n by radius, for (benchmark, method) pairs that ran with more than one w."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["w"] is not None and (r["windows"] or _is_lazymem(r["method"], aliases)):
            groups.setdefault((r["benchmark"], r["method"]), []).append(r)
    groups = {k: v for k, v in groups.items() if len({r["w"] for r in v}) > 1}
    if not groups:
        return None
    spec = ref.get("table2_radius") or {}
    paper = spec.get("rows") or {}
    ns = {r["n"] for v in groups.values() for r in v}
    n = ns.pop() if len(ns) == 1 else "n"
    sources = sorted({r["all_at_n_source"] for v in groups.values() for r in v})
    t = Table(
        "table2_radius",
        f"Table 2: accuracy and All@{n} by window radius w, ours (paper, All@{spec.get('n', 50)})",
        ["benchmark", "method", "w", "run"],
        ["LJ", "ΔLJ", "Δ CI low", "Δ CI high", f"All@{n}"],
        note=f"All@n from: {', '.join(sources)} (coverage = coverage.json; windows = union of the records' "
        f"windows; memory = all gold shown in the memory block). ΔLJ: vs the smallest w; {CI_NOTE}, paired.",
    )
    for (bench, method), group in groups.items():
        group = sorted(group, key=lambda r: r["w"])
        for r in group:
            p = ((paper.get(str(r["w"])) or {}).get(bench) or {}) if _is_lazymem(method, aliases) else {}
            cells = [Cell(r["accuracy"], p.get("LJ")), *_delta_cells(r, group[0])]
            cells.append(Cell(r["all_at_n"], p.get("all_at_n"), 3))
            t.rows.append(([bench, method, r["w"], r["run"]], cells))
    return t


def table3(rows: list[dict], ref: dict) -> list[Table]:
    """Accuracy by training stage, for runs whose config has a `stage` label."""
    staged = [r for r in rows if r["stage"] and r["windows"]]
    if not staged:
        return []
    paper = (ref.get("table3_stages") or {}).get("rows") or {}
    tables = []
    for bench in _benchmarks(staged):
        sub = sorted(
            (r for r in staged if r["benchmark"] == bench),
            key=lambda r: (STAGE_ORDER.index(r["stage"]) if r["stage"] in STAGE_ORDER else 9, r["stage"]),
        )
        types = sorted({t for r in sub for t in r["accuracy_by_type"]})
        t = Table(
            f"table3_{bench}",
            f"Table 3 ({bench}): accuracy by training stage, ours (paper)",
            ["stage", "method", "run"],
            types + ["Gate Fmt.", "strict gate (Eq. 6)", "LJ", "ΔLJ", "Δ CI low", "Δ CI high"],
            note="Gate Fmt.: the paper's, the share of first replies that contain a parseable JSON array "
            "with one KEEP/DROP decision per message (fenced or after prose counts); strict gate (Eq. 6): "
            "the share whose whole final text is exactly a valid array, the RL reward's format gate. "
            f"ΔLJ: vs the first stage; {CI_NOTE}, paired.",
        )
        for r in sub:
            p = (paper.get(r["stage"].lower()) or {}).get(bench) or {}
            by_type = p.get("by_type") or {}
            cells = [Cell(r["accuracy_by_type"].get(ty), by_type.get(ty)) for ty in types]
            # Gate Fmt. as Table 3 defines it (decision_array_ok), beside the strict gate of Eq. 6
            cells += [
                Cell(r["format_rate_table3"], p.get("gate_format"), 3),
                Cell(r["gate_format_rate"], None, 3),
                Cell(r["accuracy"], p.get("LJ")),
                *_delta_cells(r, sub[0]),
            ]
            t.rows.append(([r["stage"], r["method"], r["run"]], cells))
        tables.append(t)
    return tables


def table7(rows: list[dict], ref: dict, aliases: dict) -> Table:
    paper = ref["table7_memory_tokens"]["rows"]
    benches = _benchmarks(rows)
    keys = ["run", "method"] if _multi_run(rows) else ["method"]
    t = Table(
        "table7_memory_tokens",
        "Table 7: answer-context memory tokens (mean per question), ours (paper); median and P95 ours only",
        keys,
        [f"{b} {stat}" for b in benches for stat in ("mean", "median", "p95")],
    )
    index = {(r["run"], r["method"], r["benchmark"]): r for r in rows}
    for run, method in dict.fromkeys((r["run"], r["method"]) for r in rows):
        cells = []
        for b in benches:
            r = index.get((run, method, b))
            tok = r["memory_tokens"] if r and not r["not_applicable"] else {}
            p = (paper.get(_ref_name(method, aliases)) or {}).get(b) if tok.get("mean") is not None else None
            cells += [
                Cell(tok.get("mean"), p, 0),
                Cell(tok.get("median"), None, 0),
                Cell(tok.get("p95"), None, 0),
            ]
        t.rows.append(([run, method] if len(keys) == 2 else [method], cells))
    for name, label in _not_run(ref):
        cells = []
        for b in benches:
            cells += [Cell(None, (paper.get(name) or {}).get(b), 0), Cell(None), Cell(None)]
        t.rows.append(([None, label] if len(keys) == 2 else [label], cells))
    t.note = not_run_note()
    return t


def table8(rows: list[dict], ref: dict, aliases: dict) -> list[Table]:
    spec = ref["table8_latency_s"]
    tables = []
    for bench in _benchmarks(rows):
        paper = spec["rows"] if spec.get("benchmark") == bench else {}
        keys = ["run", "method"] if _multi_run(rows) else ["method"]
        t = Table(
            f"table8_{bench}",
            f"Table 8 ({bench}): latency per question in seconds, ours (paper)",
            keys,
            [f"{stage} {stat}" for stage in STAGES for stat in STATS],
        )
        for r in (r for r in rows if r["benchmark"] == bench):
            p = paper.get(_ref_name(r["method"], aliases)) or {}
            cells = []
            for stage in STAGES:
                d = r["latency_s"].get(stage) or {}
                ps = p.get(stage) or {}
                cells += [Cell(d.get(stat) if d.get("n") else None, ps.get(stat)) for stat in STATS]
            t.rows.append(([r["run"], r["method"]] if len(keys) == 2 else [r["method"]], cells))
        for name, label in _not_run(ref) if paper else []:
            p = paper.get(name) or {}
            cells = [Cell(None, (p.get(stage) or {}).get(stat)) for stage in STAGES for stat in STATS]
            t.rows.append(([None, label] if len(keys) == 2 else [label], cells))
        t.note = not_run_note() if paper else ""
        tables.append(t)
    return tables


def table_write_cost(rows: list[dict]) -> Table:
    """Write-time construction cost beside query-time latency, which the paper's Table 8 leaves out."""
    t = Table(
        "write_cost",
        "Write-time cost per method (not in the paper): offline construction, amortised, and in total",
        ["benchmark", "method"] + (["run"] if _multi_run(rows) else []),
        [
            "histories",
            "offline s / history",
            "LLM calls / history",
            "LLM tokens / history",
            "online s / q",
            "amortised offline s / q",
            "total s / q",
            "LJ",
        ],
        note="offline = building each history's store once (0 for query-time methods); amortised = offline "
        "seconds / questions answered from those stores; total = online (Table 8's total) + amortised.",
    )
    for r in rows:
        c = r["write_cost"]
        h = c["offline_per_history"]
        cells = [
            Cell(c["histories"], digits=0),
            Cell(h["build_seconds"], digits=1),
            Cell(h["llm_calls"], digits=1),
            Cell(h["llm_prompt_tokens"] + h["llm_completion_tokens"], digits=0),
            Cell(c["online_s_per_question"]),
            Cell(c["amortised_offline_s_per_question"]),
            Cell(c["total_s_per_question"]),
            Cell(r["accuracy"]),
        ]
        t.rows.append(([r["benchmark"], r["method"]] + ([r["run"]] if _multi_run(rows) else []), cells))
    return t


def build_tables(rows: list[dict], ref: dict | None = None, aliases: dict | None = None) -> list[Table]:
    ref = ref or load_references()
    aliases = aliases or {}
    tables = table1(rows, ref, aliases)
    t2 = table2(rows, ref, aliases)
    tables += [t2] if t2 else []
    tables += table3(rows, ref)
    tables.append(table7(rows, ref, aliases))
    tables += table8(rows, ref, aliases)
    tables.append(table_write_cost(rows))
    return tables


def write_tables(
    tables: list[Table], out: Path, name: str = "report.md", heading: str = "LazyMem report"
) -> str:
    """NAME (Markdown) plus one CSV per table; returns the Markdown."""
    md = "\n\n".join(t.markdown() for t in tables) + "\n"
    (out / name).write_text(f"## {heading}\n\n" + md)
    for t in tables:
        (out / f"{t.key}.csv").write_text(t.csv())
    return md
