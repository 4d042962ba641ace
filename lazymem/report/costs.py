"""Write-time construction cost beside query-time cost (what the paper's Table 8 leaves out).

A method that builds memory before any question (Mem0) puts its store's ledger into every record as
`detail["ingest"]`: `store` (one id per built store, i.e. per history and configuration),
`build_seconds`, `llm_calls`, `llm_prompt_tokens`, `llm_completion_tokens`. A store counts once however
many questions read it; a method without it (every query-time method) has zero offline cost.

Amortised offline cost per question = the stores' build seconds / the questions answered from them;
total cost per question = that + the online latency (retrieval + processing + answer, Table 8's total).
The systems the paper reports but we cannot run, and why, are in experiments/systems.json (`not_run`).
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from lazymem.experiments import EXPERIMENTS_DIR  # noqa: E402

SYSTEMS = EXPERIMENTS_DIR / "systems.json"
INGEST_KEYS = ("build_seconds", "llm_calls", "llm_prompt_tokens", "llm_completion_tokens")


def write_cost(records: list[dict]) -> dict:
    """One method's offline and online cost from its records (records.jsonl lines of that method)."""
    ok = [r for r in records if r.get("status") == "ok"]
    stores: dict[str, dict] = {}
    for r in ok:
        ingest = (r.get("detail") or {}).get("ingest")
        if ingest:
            if "store" not in ingest:
                qid = r.get("qid")
                raise ValueError(f"record {qid!r}: detail.ingest has no 'store' id: {sorted(ingest)}")
            stores.setdefault(ingest["store"], ingest)
    totals = {k: sum(float(s.get(k) or 0) for s in stores.values()) for k in INGEST_KEYS}
    n = len(ok)
    online = [r["latency_s"]["total"] for r in ok if "total" in (r.get("latency_s") or {})]
    online_mean = sum(online) / len(online) if online else None
    amortised = totals["build_seconds"] / n if n else None
    return {
        "questions": n,
        "histories": len(stores),
        "offline_total": totals,
        "offline_per_history": {k: v / len(stores) if stores else 0.0 for k, v in totals.items()},
        "amortised_offline_s_per_question": amortised,
        "online_s_per_question": online_mean,
        "total_s_per_question": None if online_mean is None or amortised is None else online_mean + amortised,
    }


def cost_plot(rows: list[dict], out: Path) -> list[Path]:
    """Accuracy against total cost per question (online + amortised offline), one PNG per benchmark."""
    paths = []
    for bench in dict.fromkeys(r["benchmark"] for r in rows):
        pts = [
            (r["method"], r["write_cost"]["total_s_per_question"], r["accuracy"])
            for r in rows
            if r["benchmark"] == bench
            and r.get("write_cost")
            and r["write_cost"]["total_s_per_question"] is not None
            and r.get("accuracy") is not None
        ]
        if not pts:
            continue
        fig, ax = plt.subplots(figsize=(5.5, 4))
        for name, x, y in pts:
            ax.scatter([x], [y])
            ax.annotate(name, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
        ax.set_xscale("log")
        ax.set_xlabel("total cost per question (s): online + amortised offline")
        ax.set_ylabel("LLM-judge accuracy")
        ax.set_title(f"Accuracy vs total cost ({bench})")
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"accuracy_vs_total_cost_{bench}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths


def not_run() -> dict[str, str]:
    """Paper systems we do not run, by the paper's method name, with the reason to print beside them."""
    systems = json.loads(SYSTEMS.read_text())["systems"]
    return {
        name: s["reason"].removeprefix("paper-reported, not run: ")
        for name, s in systems.items()
        if not s["run"]
    }


def not_run_note() -> str:
    """The footnote for tables that show those systems' paper numbers."""
    return "Paper-reported, not run here: " + "; ".join(f"{k} ({v})" for k, v in not_run().items()) + "."
