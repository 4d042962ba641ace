"""Records, summaries and run directories shaped as the tasks write them, for the tests that read them back
(eval's metrics and results, report's tables, plots and dashboard, tracking)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from lazymem.eval.metrics import summarize
from lazymem.eval.summary import summary, write_summary

# --- eval/metrics.py's summary over a few hand-made records ------------------------------------------


def metric_record(
    qid,
    qtype,
    correct,
    *,
    status="ok",
    abstention=False,
    tokens=10,
    gold=(1,),
    shown=(1,),
    decided=(),
    windows=(),
    lat=1.0,
):
    r = {
        "qid": qid,
        "method": "m",
        "type": qtype,
        "abstention": abstention,
        "scores": {},
        "status": status,
        "error": None if status == "ok" else "answer model call failed: 500",
    }
    if status == "ok":
        r |= {
            "correct": correct,
            "memory_tokens": tokens,
            "gold_idx": list(gold),
            "shown": list(shown),
            "latency_s": {
                "retrieval": 0.1,
                "processing": lat,
                "answer": 2.0,
                "judge": 0.5,
                "total": 2.1 + lat,
            },
            "retrieved": [],
            "retrieval_scores": [],
            "windows": list(windows),
            "decided": list(decided),
            "detail": {},
        }
    return r


METRIC_RECORDS = [
    metric_record(
        "a",
        "x",
        True,
        tokens=10,
        decided=[0, 1, 2, 3],
        shown=(1, 2),
        # words of the KEEP contents found in their messages, of all such words (no field: before it existed)
        windows=[
            {"outcome": "gate_ok", "source_words": [3, 4]},
            {"outcome": "salvaged", "source_words": [0, 0]},
        ],
    ),
    metric_record(
        "b",
        "x",
        False,
        tokens=30,
        gold=(5, 6),
        shown=(5,),
        decided=[4, 5, 6, 7],
        windows=[{"outcome": "gate_ok", "source_words": [5, 6]}],
    ),
    metric_record(
        "c", "y", True, tokens=20, lat=3.0, windows=[{"outcome": "fallback"}, {"outcome": "gate_ok"}]
    ),
    metric_record("d", "y", None),  # the judge reply had no label
    metric_record("e", "y", True, abstention=True, gold=(), shown=()),
    metric_record("f", "x", None, status="error"),
]


# --- an evaluate run directory of two radii (w=0 misses a gold message), as report/ reads it ----


EVIL = "</script><script>alert('x')</script><b>bold</b>"


def report_record(qid, method, qtype, correct, tokens, total, windows=None, gold=(3,)):
    return {
        "qid": qid,
        "method": method,
        "type": qtype,
        "abstention": False,
        "question": f"question {qid}?",
        "reference": "Clover",
        "gold_idx": list(gold),
        "retrieved": [3, 9],
        "shown": [3] if correct else [9],
        "retrieval_scores": [0.9, 0.5],
        "decided": [2, 3, 4] if windows else [],
        "windows": windows or [],
        "detail": {},
        "scores": {},
        "memory": f"memory of {qid} {EVIL}",
        "answer": f"answer {qid}",
        "answer_thinking": "thinking...",
        "correct": correct,
        "judge_raw": "Yes" if correct else "No",
        "status": "ok",
        "error": None,
        "memory_tokens": tokens,
        "latency_s": {
            "retrieval": 0.1,
            "processing": total - 1.1,
            "answer": 1.0,
            "judge": 0.5,
            "total": total,
        },
    }


def report_window(idx):
    decisions = [["KEEP", f"kept {i}", "relevant"] if i == 3 else ["DROP", "", "noise"] for i in idx]
    return {"idx": idx, "core": [idx[len(idx) // 2]], "outcome": "gate_ok", "gate_error": None,
            "decisions": decisions, "raw": "[]"}  # fmt: skip


def write_run(path, w, records, stage=None):
    path.mkdir(parents=True)
    cfg = {"task": "evaluate", "w": w, "data": {"name": "longmemeval"}, "retrieval": {"n": 50},
           "methods": {"lazymem_4b": {"name": "lazymem_4b", "radius": w}, "rag_top50": {"name": "rag_top50"}},
           "llm": {"roles": {"memory": {"model": "tiny"}}}}  # fmt: skip
    if stage:
        cfg["stage"] = stage
    (path / "config.yaml").write_text(yaml.safe_dump(cfg))
    by_method = {}
    for r in records:
        by_method.setdefault(r["method"], []).append(r)
    methods = {m: summarize(rs) for m, rs in by_method.items()}
    bench = {"dataset": "longmemeval", "judge": {}, "methods": methods, "resume_dropped": {}}
    write_summary(path, summary("evaluate", {"longmemeval": bench}))
    (path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def sweep_records(w):
    # w=0: the windows miss gold message 3 for q2; w=1 covers it for both questions.
    win_q1 = [report_window([2, 3, 4])]
    win_q2 = [report_window([8, 9, 10])] if w == 0 else [report_window([2, 3, 4]), report_window([8, 9, 10])]
    return [
        report_record("q1", "lazymem_4b", "knowledge-update", True, 200, 40.0, win_q1),
        report_record("q2", "lazymem_4b", "multi-session", w == 1, 220, 44.0, win_q2),
        report_record("q1", "rag_top50", "knowledge-update", True, 14000, 30.0),
        report_record("q2", "rag_top50", "multi-session", False, 15000, 32.0),
    ]


def write_sweep(root: Path) -> Path:
    """A two-job sweep at `root`: job 0 at w=0, job 1 at w=1."""
    for i, w in ((0, 0), (1, 1)):
        write_run(root / str(i), w, sweep_records(w))
    return root


# --- a main_table summary: LoCoMo records and the judge identity ---------------------------------


def table_records(method, n_ok, correct, tokens, total):
    return [
        {
            "qid": f"q{i}",
            "method": method,
            "type": "temporal",
            "abstention": False,
            "status": "ok",
            "error": None,
            "correct": i < correct,
            "memory_tokens": tokens,
            "gold_idx": [1],
            "shown": [1],
            "retrieved": [1],
            "retrieval_scores": [0.5],
            "windows": [],
            "decided": [],
            "detail": {},
            "latency_s": {"retrieval": 0.5, "answer": total - 0.5, "judge": 1.0, "total": total},
            "scores": {"f1": float(i < correct)},
        }
        for i in range(n_ok)
    ]


LOCOMO_JUDGE = {
    "model": "deepseek-v4-pro",
    "style": "locomo",
    "prompts": "lazymem",
    "prompts_sha256": None,
    "prompt_version": "v1",
    "decision_rule": "first CORRECT / WRONG",
    "temperature": 0.0,
    "max_tokens": 1024,
}


# --- an evaluate-like run directory as tracking/ logs it ---------------------------------------------


SECRET = "sk-fake-0123456789abcdef"  # a judge key the tracking tests must never find written
KEY_ENV = "LAZYMEM_FAKE_TRACKING_KEY"


def tracked_record(
    qid, method, qtype, correct, tokens=100, total=2.0, status="ok", answer="an answer", windows=()
):
    return {
        "qid": qid,
        "method": method,
        "type": qtype,
        "abstention": False,
        "question": f"question {qid}?",
        "reference": "Clover",
        "query_time": "2023/05/20 (Sat) 10:00",
        "gold_idx": [3],
        "scores": {},
        "retrieved": [3, 9],
        "retrieval_scores": [0.9, 0.1],
        "shown": [3],
        "decided": [],
        "windows": list(windows),
        "detail": {},
        "memory": "memory",
        "answer": answer,
        "correct": correct if status == "ok" else None,
        "status": status,
        "error": None if status == "ok" else "TimeoutError: judge",
        "memory_tokens": tokens,
        "latency_s": {"retrieval": 0.1, "processing": 0.4, "answer": 1.0, "judge": 0.5, "total": total},
    }


TRACKED_RECORDS = [
    tracked_record("q1", "lazymem", "multi-session", True, answer="x" * 5000),
    tracked_record("q2", "lazymem", "knowledge-update", False),
    tracked_record("q1", "rag", "multi-session", True, tokens=9000, total=1.5),
    tracked_record("q2", "rag", "knowledge-update", None, status="error"),
]


TRACKED_JUDGE = {
    "model": "deepseek-v4-pro",
    "model_id": None,
    "style": "longmemeval",
    "prompts": "lazymem",
    "prompts_sha256": None,
    "prompt_version": "v1",
    "decision_rule": "yes/no",
    "temperature": 0.0,
    "max_tokens": 10,
    "metrics": [],
}


def tracked_bench(records=TRACKED_RECORDS) -> dict:
    methods = {}
    for r in records:
        methods.setdefault(r["method"], []).append(r)
    return {
        "dataset": "synthetic",
        "judge": TRACKED_JUDGE,
        "methods": {m: summarize(rs) for m, rs in methods.items()},
        "resume_dropped": {"errors": 0, "torn_lines": 0},
    }


def tracked_summary(**benchmarks) -> dict:
    return summary(
        "evaluate", benchmarks or {"synthetic": tracked_bench()}, {"answer": {"calls": 4, "cache_hits": 1}}
    )


def tracking_cfg(**logger) -> DictConfig:
    judge = {"api_key_env": KEY_ENV, "api_key": SECRET, "header": f"${{oc.env:{KEY_ENV},null}}"}
    base = {
        "task": "evaluate",
        "llm": {"judge": judge},
        "logger": {
            "backend": "wandb",
            "project": "lazymem",
            "entity": None,
            "mode": "offline",
            "group": None,
            "tags": ["t1"],
            "dir": None,
            "log_records": True,
            "max_records": 1000,
            **logger,
        },
    }
    return OmegaConf.create(base)


def write_tracked_run(d: Path) -> Path:
    """A finished evaluate run at `d`: summary, records, meta, a coverage report, a table and a plot."""
    d.mkdir()
    write_summary(d, tracked_summary())
    (d / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in TRACKED_RECORDS))
    (d / "meta.json").write_text(
        json.dumps({"task": "evaluate", "datasets": [{"name": "synthetic", "sha256": "ab12"}]})
    )
    (d / "coverage.json").write_text(json.dumps({"n": 50, "radii": {"2": {"all_at_n": 0.75}}}))
    (d / "table1.csv").write_text("method,LJ\nlazymem,0.5\nrag,0.25\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(1, 1))
    fig.savefig(d / "tradeoff.png")
    plt.close(fig)
    return d
