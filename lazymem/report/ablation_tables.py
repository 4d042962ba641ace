"""The paper's appendix tables 5, 6 (NanoMemory depth x constructor), 11 (reward ordering) and 12 (memory
perturbations) from collected runs, the paper's numbers beside ours (Markdown `ours (paper)`, CSV `X_paper`).

Tables 5/6 come from task=evaluate runs labelled with a `constructor` (the nanomemory_depth experiments):
one row per (top-k sessions, constructor). Table 11 from runs whose summary.json holds the table
`reward_diagnostics` (task=reward_rollouts), Table 12 from those holding `perturbation` (task=perturbation).
"""

from __future__ import annotations

from lazymem.numeric import mean
from lazymem.report.collect import Run, correct_by_question
from lazymem.report.tables import CI_NOTE, STATS, Cell, Table, ci_cells

NANOMEMORY = "lazymem.methods.nanomemory.NanoMemory"
REWARDS = {"micro": "Micro (Eq. 10)", "symmetric": "Symmetric (Eq. 11)", "ours": "Ours (Eq. 12)"}


def _pct(x: float | None) -> float | None:
    return None if x is None else 100 * x


def _method_config(run: Run, method: str) -> dict:
    node = run.get("methods") or {}
    if isinstance(node.get(method), dict):
        return node[method]
    single = run.get("method") or {}
    return single if single.get("name") == method else {}


def table12(name: str, result: dict, ref: dict) -> Table:
    """A perturbation summary (task=perturbation) in Table 12's layout (percent and percentage points)."""
    paper = (ref.get("table12_perturbation") or {}).get("rows") or {}
    t = Table(
        f"table12_{name}".replace("/", "_"),
        f"Table 12 ({name}): controlled memory perturbations, ours (paper)",
        ["memory", "n"],
        ["Acc. (%)", "Err.", "Δ (pp)", "Δ 95% low", "Δ 95% high", "C→I (%)", "Tok."],
        note="n: questions scored; Err.: the row's memories whose answer or judge call failed (e.g. a +all "
        "non-gold memory past the answer model's context), left out of n and of every number of the row; "
        "Δ: paired accuracy change from full gold, 95% CI by question-level paired bootstrap; C→I: share "
        "of answers correct with full gold that turn wrong; Tok.: mean answer-model input tokens (Qwen).",
    )
    for variant, row in result["variants"].items():
        p = paper.get(variant) or {}
        delta = row["delta"] or {}
        t.rows.append(
            (
                [variant, row["questions"]],
                [
                    Cell(_pct(row["accuracy"]), p.get("accuracy"), 1),
                    Cell(row.get("errors"), None, 0),
                    Cell(_pct(delta.get("mean")), p.get("delta"), 1),
                    Cell(_pct(delta.get("low")), p.get("delta_low"), 1),
                    Cell(_pct(delta.get("high")), p.get("delta_high"), 1),
                    Cell(_pct(row["c_to_i"]), p.get("c_to_i"), 1),
                    Cell(row["input_tokens"], p.get("tokens"), 0),
                ],
            )
        )
    return t


def table11(name: str, result: dict, ref: dict) -> Table:
    """A reward-ordering diagnostic (lazymem/train/grpo/diagnostics.py) in Table 11's layout."""
    paper = (ref.get("table11_reward_ordering") or {}).get("rows") or {}
    t = Table(
        f"table11_{name}".replace("/", "_"),
        f"Table 11 ({name}): reward ordering on format-valid rollouts, ours (paper)",
        ["reward"],
        ["Inversion (%)", "Tie (%)", "Gold gap"],
        note=f"{result['n_valid']}/{result['n_rollouts']} format-valid rollouts, "
        f"{result['n_prompts']} prompts, {result['n_conflict_pairs']} conflict pairs, "
        f"{result['n_gap_prompts']} prompts in the gold gap.",
    )
    for key, row in result["rewards"].items():
        p = paper.get(key) or {}
        t.rows.append(
            (
                [REWARDS.get(key, key)],
                [
                    Cell(_pct(row["inversion"]), p.get("inversion"), 1),
                    Cell(_pct(row["tie"]), p.get("tie"), 1),
                    Cell(row["gold_gap"], p.get("gold_gap"), 3),
                ],
            )
        )
    return t


def nanomemory_rows(runs: list[Run]) -> list[dict]:
    """One row per (run, benchmark, NanoMemory method) of runs labelled with a `constructor`."""
    out = []
    for run in runs:
        constructor = run.get("constructor")
        if constructor is None:
            continue
        for bench, summary in run.summaries.items():
            for method, s in summary["methods"].items():
                cfg = _method_config(run, method)
                if cfg.get("_target_") != NANOMEMORY:
                    continue
                ok = [
                    r for r in run.records.get(bench, []) if r.get("method") == method and r["status"] == "ok"
                ]
                out.append(
                    {
                        "run": run.name,
                        "benchmark": bench,
                        "top_k": cfg.get("top_sessions"),
                        "constructor": str(constructor),
                        "model": run.get(f"llm.roles.{cfg.get('role')}.model") or run.get("llm.common.model"),
                        "correct": correct_by_question(run, bench, method),
                        "tokens": mean(
                            r["detail"]["session_tokens"] for r in ok if "session_tokens" in r["detail"]
                        ),
                        "summary": s,
                    }
                )
    return out


def tables56(runs: list[Run], ref: dict) -> list[Table]:
    """Tables 5 (LongMemEval) and 6 (LoCoMo): per top-k and constructor, Tok., accuracy, filtering latency."""
    rows = nanomemory_rows(runs)
    spec = ref.get("table56_nanomemory") or {}
    tables = []
    for bench in dict.fromkeys(r["benchmark"] for r in rows):
        sub = sorted(
            (r for r in rows if r["benchmark"] == bench), key=lambda r: (r["top_k"], r["constructor"])
        )
        paper = (spec.get("rows") or {}).get(bench) or {}
        types = sorted({t for r in sub for t in r["summary"].get("accuracy_by_type") or {}})
        number = {"longmemeval": 5, "locomo": 6}.get(bench, "5/6")
        t = Table(
            f"table56_{bench}",
            f"Table {number} ({bench}): NanoMemory retrieval depth x constructor, ours (paper)",
            ["top-k", "constructor", "model", "run"],
            ["Tok.", *types, "LJ", "LJ CI low", "LJ CI high", *(f"filter {s}" for s in STATS)],
            note="Tok.: mean tokens of the retrieved sessions passed to the constructor (Qwen tokenizer); "
            f"filter: the constructor call's latency in seconds (the processing stage); {CI_NOTE}.",
        )
        for r in sub:
            p = (paper.get(str(r["top_k"])) or {}).get(r["constructor"]) or {}
            s = r["summary"]
            by_type, latency = p.get("by_type") or {}, p.get("latency_s") or {}
            processing = (s.get("latency_s") or {}).get("processing") or {}
            cells = [Cell(r["tokens"], (paper.get(str(r["top_k"])) or {}).get("tokens"), 0)]
            cells += [Cell((s.get("accuracy_by_type") or {}).get(ty), by_type.get(ty)) for ty in types]
            cells += [Cell(s.get("accuracy"), p.get("LJ")), *ci_cells(r)]
            cells += [
                Cell(processing.get(st) if processing.get("n") else None, latency.get(st)) for st in STATS
            ]
            t.rows.append(([r["top_k"], r["constructor"], r["model"], r["run"]], cells))
        tables.append(t)
    return tables


def build(runs: list[Run], ref: dict) -> list[Table]:
    tables = tables56(runs, ref)
    for run in runs:
        found = run.summary["tables"]
        if "reward_diagnostics" in found:
            tables.append(table11(run.name, found["reward_diagnostics"], ref))
        if "perturbation" in found:
            tables.append(table12(run.name, found["perturbation"], ref))
    return tables
