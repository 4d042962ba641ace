"""The query-time pipeline end to end through the CLI.

Plumbing (records, summary, cache reruns, the latency protocol) runs every role on the LLM stand-in
(tests/standin.py), which answers each role in its shape. The real parts run once each: a killed run
resumes on a real llama.cpp server (the bundled SmolLM2-135M), and the bundled Qwen2.5-0.5B answers one
quickstart-shaped run.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from lazymem.construct.accuracy import WORD
from lazymem.eval.summary import read_summary

from helpers import ROOT, SMOLLM2, run_cli

pytestmark = pytest.mark.slow

SMALL = [
    "+experiment=quickstart",
    "data.loader.per_type=1",
    "data.loader.abstention=1",
    "data.limit=4",
]
METHODS = {"lazymem", "extractive_gate", "rag_top20", "oracle_turn"}


def records(run_dir):
    return [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("e2e")
    env = {"LAZYMEM_CACHE": str(base / "cache")}
    out = run_cli(*SMALL, f"hydra.run.dir={base}/run1", env=env, timeout=600, standin=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return base, env, out


def test_every_method_writes_records_summary_and_results(first_run):
    base, _, out = first_run
    run_dir = base / "run1"
    recs = records(run_dir)
    assert {(r["method"], r["qid"]) for r in recs} == {
        (m, q) for m in METHODS for q in {r["qid"] for r in recs}
    }
    assert len(recs) == 16 and all(r["status"] == "ok" for r in recs)
    for r in recs:
        assert r["answer"] and r["judge_raw"] and r["correct"] in (True, False, None)
        assert r["latency_s"]["answer"] > 0 and r["memory_tokens"] >= 0
    lazy = [r for r in recs if r["method"] == "lazymem"]
    for r in lazy:
        assert r["retrieved"] and len(r["retrieved"]) <= 5
        assert all(w["outcome"] in {"gate_ok", "salvaged", "retried", "fallback"} for w in r["windows"])
        assert all(len(w["decisions"]) == len(w["idx"]) for w in r["windows"])
        assert r["latency_s"]["processing"] > 0
    lazy_windows = {r["qid"]: [w["idx"] for w in r["windows"]] for r in lazy}
    gate = [r for r in recs if r["method"] == "extractive_gate"]
    for r in gate:  # lazymem's windows, decided without an LLM
        assert [w["idx"] for w in r["windows"]] == lazy_windows[r["qid"]]
        assert all(w["outcome"] == "gate_ok" and w["calls"] == 0 for w in r["windows"])
    oracle = [r for r in recs if r["method"] == "oracle_turn"]
    assert all(r["shown"] == r["gold_idx"] for r in oracle)
    summary = read_summary(run_dir)
    assert list(summary["benchmarks"]) == ["synthetic"] and summary["task"] == "evaluate"
    methods = summary["benchmarks"]["synthetic"]["methods"]
    assert set(methods) == METHODS
    lz = methods["lazymem"]
    assert lz["windows"] == sum(len(r["windows"]) for r in lazy)
    assert 0 <= lz["gate_format_rate"] <= 1 and lz["errors"] == 0
    assert summary["llm"]["memory"]["calls"] >= lz["windows"]
    assert "## Accuracy (synthetic)" in (run_dir / "results.md").read_text()
    assert "| lazymem |" in out.stdout
    assert json.loads((run_dir / "meta.json").read_text())["status"] == "ok"


def test_rerun_is_served_from_the_cache(first_run):
    base, env, _ = first_run
    out = run_cli(*SMALL, f"hydra.run.dir={base}/run2", env=env, timeout=600, standin=True)
    assert out.returncode == 0, out.stderr[-3000:]
    llm = json.loads((base / "run2" / "summary.json").read_text())["llm"]
    for role in ("memory", "answer", "judge"):
        assert llm[role]["calls"] > 0 and llm[role]["cache_hits"] == llm[role]["calls"], (role, llm[role])
    a = {(r["method"], r["qid"]): r["answer"] for r in records(base / "run1")}
    b = {(r["method"], r["qid"]): r["answer"] for r in records(base / "run2")}
    assert a == b


# kill -9 on a real model server: two methods with short prompts (lazymem's grammar decoding and RAG's
# 20-message prompts would only add minutes)
KILLED = [*SMALL, "~methods.lazymem", "~methods.rag_top20", *SMOLLM2, "llm.common.decoding.max_tokens=48"]
KILLED_METHODS = {"extractive_gate", "oracle_turn"}


@pytest.mark.solo
def test_killed_run_resumes_without_duplicates(tmp_path):
    env = {**os.environ, "LAZYMEM_CACHE": str(tmp_path / "cache")}
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "lazymem.run", *KILLED, "logger=none", f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    path = run_dir / "records.jsonl"
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and len(path.read_text().splitlines()) >= 2:
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = records(run_dir)
    assert 2 <= len(before) < 4 * len(KILLED_METHODS)
    out = subprocess.run(
        [*cmd, "resume=true"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, out.stderr[-3000:]
    after = records(run_dir)
    keys = [(r["method"], r["qid"]) for r in after]
    assert len(keys) == len(set(keys)) == 4 * len(KILLED_METHODS)  # 4 questions per method
    assert all(r["status"] == "ok" for r in after)
    done_before = {(r["method"], r["qid"]): r for r in before if r["status"] == "ok"}
    assert all(after[keys.index(k)] == r for k, r in done_before.items())  # finished work kept as it was
    # the killed run's model server died with it (PR_SET_PDEATHSIG): no llama_cpp.server is left over
    leftovers = subprocess.run(
        ["pgrep", "-f", f"llama_cpp.server.*{tmp_path}"], capture_output=True, text=True
    )
    assert leftovers.stdout.strip() == ""


@pytest.mark.solo
def test_quickstart_on_the_bundled_qwen(tmp_path):
    """The README's job in small: one question, the lazymem method, Qwen2.5-0.5B on llama.cpp as memory
    model (grammar-constrained decisions: about a second per token on 2 cores, so one window of one
    message), answer model and judge."""
    out = run_cli(
        "+experiment=quickstart",
        "~methods.extractive_gate",
        "~methods.rag_top20",
        "~methods.oracle_turn",
        "data.limit=1",
        "retrieval.n=1",
        "w=0",
        f"hydra.run.dir={tmp_path}/run",
        env={"LAZYMEM_CACHE": str(tmp_path / "cache")},
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    [rec] = records(tmp_path / "run")
    assert rec["method"] == "lazymem" and rec["status"] == "ok" and rec["windows"]
    assert all(len(w["decisions"]) == len(w["idx"]) for w in rec["windows"])
    for w in rec["windows"]:  # the words of its KEEP texts, and how many of them its messages hold
        found, words = w["source_words"]
        assert words == sum(len(WORD.findall(d[1].lower())) for d in w["decisions"] if d[0] == "KEEP")
        assert 0 <= found <= words
    assert rec["answer"] and rec["judge_raw"] and rec["correct"] in (True, False)
    summary = read_summary(tmp_path / "run")
    assert (
        summary["llm"]["memory"]["calls"] >= len(rec["windows"]) and summary["llm"]["memory"]["errors"] == 0
    )
    assert "qwen2.5-0.5b" in (tmp_path / "run" / "lazymem.log").read_text()
    assert "| lazymem |" in out.stdout


def test_latency_protocol_warmup_and_repeats(tmp_path):
    out = run_cli(
        "task=evaluate",
        "method=oracle_turn",
        "data.limit=2",
        "latency.warmup=1",
        "latency.repeats=2",
        "llm.cache=false",
        f"hydra.run.dir={tmp_path}",
        timeout=600,
        standin=True,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    recs = records(tmp_path)
    assert len(recs) == 2  # warm-up passes are not recorded; the first timed pass is
    assert all(r["correct"] is not None for r in recs)
    later = [json.loads(x) for x in (tmp_path / "latency_runs.jsonl").read_text().splitlines()]
    assert sorted((x["qid"], x["pass"]) for x in later) == sorted((r["qid"], 1) for r in recs)
    summary = read_summary(tmp_path)
    assert summary["benchmarks"]["synthetic"]["methods"]["oracle_turn"]["latency_s"]["answer"]["n"] == 4
    # 1 full warm-up pass + 2 timed passes over 2 questions; only the first timed pass is judged
    assert summary["llm"]["answer"]["calls"] == 2 + 4
    assert summary["llm"]["judge"]["calls"] == 2
    assert summary["llm"]["answer"]["cache_hits"] == 0
