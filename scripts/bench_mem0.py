"""Measure Mem0 beside lazymem and rag_top50 on the same small LoCoMo sample (CPU, bundled models).

    .venv/bin/python scripts/bench_mem0.py --locomo ../shared/data/locomo_dev8.json --out /tmp/bench_mem0

Cuts one LoCoMo conversation to its first sessions (and the category 1-4 questions whose evidence lies in
them), runs task=evaluate for the three methods, then prints ingestion time per history and per message,
query-time latency, memory tokens and accuracy (markdown; also OUT/bench.md and OUT/bench.json).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lazymem.report.costs import write_cost  # noqa: E402

METHODS = ("mem0", "lazymem", "rag_top50")


def truncate_locomo(
    src: Path, dst: Path, conversation: int, sessions: int, questions: int | None, messages: int | None = None
) -> int:
    """Write a LoCoMo file holding one conversation's first `sessions` sessions (each cut to its first
    `messages` turns) and the category 1-4 questions answerable from them (at most `questions`); returns
    how many questions it kept."""
    sample = json.loads(src.read_text())[conversation]
    conv = sample["conversation"]
    keep = [f"session_{i}" for i in range(1, sessions + 1)]
    cut = {k: conv[k] for k in ("speaker_a", "speaker_b")}
    cut |= {k: conv[k][:messages] for k in keep} | {f"{k}_date_time": conv[f"{k}_date_time"] for k in keep}
    kept = {t["dia_id"] for k in keep for t in cut[k]}
    qa = [
        q
        for q in sample["qa"]
        if q.get("category") in (1, 2, 3, 4) and q.get("evidence") and set(q["evidence"]) <= kept
    ][:questions]
    out = {"sample_id": sample["sample_id"], "conversation": cut, "qa": qa}
    dst.write_text(json.dumps([out]))
    return len(qa)


def run(out: Path, data: Path, extra: list[str]) -> subprocess.CompletedProcess:
    methods = [f"+method@methods.{m}={m}" for m in METHODS]
    cmd = [
        sys.executable, "-m", "lazymem.run", "task=evaluate", "data=locomo", f"data.path={data}",
        "data.loader.conversations=[0]", "logger=none", f"hydra.run.dir={out / 'run'}",
        "llm.common.llamacpp.n_ctx=16384", *methods, *extra,
    ]  # fmt: skip
    return subprocess.run(cmd, cwd=ROOT, text=True, capture_output=True, env={**os.environ})


def measure(run_dir: Path) -> dict:
    records = [json.loads(x) for x in (run_dir / "records.jsonl").read_text().splitlines()]
    summary = json.loads((run_dir / "summary.json").read_text())
    bench = next(iter(summary["benchmarks"].values()))
    out = {}
    for m in METHODS:
        recs = [r for r in records if r["method"] == m]
        s = bench["methods"][m]
        cost = write_cost(recs)
        ingest = next((r["detail"]["ingest"] for r in recs if r.get("detail", {}).get("ingest")), None)
        out[m] = {
            "questions": s["questions"],
            "ok": s["ok"],
            "accuracy": s["accuracy"],
            "f1": s.get("f1"),
            "contains_reference": s.get("contains_reference"),
            "gold_recall_in_memory": s.get("gold_recall_in_memory"),
            "memory_tokens_mean": (s.get("memory_tokens") or {}).get("mean"),
            "latency_s": {k: (v or {}).get("mean") for k, v in (s.get("latency_s") or {}).items()},
            "write_cost": cost,
            "ingest": ingest,
        }
    return out


def report(found: dict) -> str:
    def f(x, d=2):
        return "–" if x is None else f"{x:.{d}f}"

    lines = [
        "| method | LJ | F1 | contains ref | gold in memory | memory tokens | retrieval s | processing s "
        "| answer s | online total s "
        "| ingestion s / history | ingestion s / message | LLM calls / history |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m, x in found.items():
        lat, ing = x["latency_s"], x["ingest"] or {}
        per_msg = ing["build_seconds"] / ing["messages"] if ing.get("messages") else None
        lines.append(
            f"| {m} | {f(x['accuracy'])} | {f(x['f1'])} | {f(x['contains_reference'])} | "
            f"{f(x['gold_recall_in_memory'])} | {f(x['memory_tokens_mean'], 0)} | "
            f"{f(lat.get('retrieval'))} | {f(lat.get('processing'))} | {f(lat.get('answer'))} | "
            f"{f(lat.get('total'))} | {f(ing.get('build_seconds'), 1)} | {f(per_msg)} | "
            f"{ing.get('llm_calls', 0)} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--locomo", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--conversation", type=int, default=1)
    p.add_argument("--sessions", type=int, default=1)
    p.add_argument("--messages", type=int, default=10, help="turns kept per session")
    p.add_argument("--questions", type=int, default=8)
    p.add_argument("overrides", nargs="*", help="extra lazymem overrides, e.g. llm.cache=false")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    data = a.out / "locomo_sample.json"
    n = truncate_locomo(a.locomo, data, a.conversation, a.sessions, a.questions, a.messages)
    done = run(a.out, data, a.overrides)
    (a.out / "run.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        sys.exit(f"lazymem run failed ({done.returncode}); see {a.out / 'run.log'}")
    found = measure(a.out / "run")
    table = (
        f"LoCoMo conversation {a.conversation}, first {a.sessions} session(s) cut to {a.messages} turns, "
        f"{n} questions\n\n" + report(found)
    )
    (a.out / "bench.json").write_text(json.dumps(found, indent=1))
    (a.out / "bench.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
