"""task=evaluate on tiny synthetic data, every LLM role on the in-process stand-in (tests/standin.py):
records, summary.json and results.md per method, resume, the preflight stop, and the method and retriever
checks. Real model servers and the latency protocol: tests/e2e/test_evaluate.py."""

from __future__ import annotations

import json
import logging
import shutil

import pytest
from hydra import compose, initialize_config_dir

from lazymem.conf import CONF_DIR
from lazymem.data import load_dataset
from lazymem.eval.summary import read_summary
from lazymem.llm.llm_set import build_llms
from lazymem.methods.oracle import OracleTurn
from lazymem.methods.rag import RAG
from lazymem.retrieval.hybrid import HybridRetriever
from lazymem.tasks.evaluate import build_methods, build_retriever, evaluate

from helpers import run_cli
from standin import STANDIN_SEARCHPATH

# two methods over three synthetic questions; BM25 alone, so no encoder loads
SMALL = [
    "task=evaluate",
    "+method@methods.rag_top3=rag",
    "methods.rag_top3.top_k=3",
    "+method@methods.oracle_turn=oracle_turn",
    "retrieval=bm25",
    "data.loader.per_type=1",
    "data.loader.abstention=0",
    "data.limit=3",
]
METHODS = ["rag_top3", "oracle_turn"]


def records(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("evaluate")
    env = {"LAZYMEM_CACHE": str(base / "cache")}
    out = run_cli(*SMALL, f"hydra.run.dir={base / 'run'}", env=env, timeout=300, standin=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return base, env, out


def config(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=["task=evaluate", *overrides])


def test_every_method_answers_every_question_one_method_after_the_other(first_run):
    base, _, _ = first_run
    recs = records(base / "run")
    qids = ["syn000", "syn001", "syn002"]
    assert [(r["method"], r["qid"]) for r in recs] == [(m, q) for m in METHODS for q in qids]
    assert all(r["status"] == "ok" and r["error"] is None for r in recs)
    for r in recs:
        assert r["answer"] and r["judge_raw"] and r["memory_style"] == "raw"
        assert r["latency_s"]["answer"] > 0 and r["latency_s"]["total"] >= r["latency_s"]["answer"]
        assert r["correct"] == (r["reference"] in r["answer"])  # the stand-in judge's rule, on this answer


def test_each_methods_records_hold_its_own_memory(first_run):
    base, _, _ = first_run
    recs = records(base / "run")
    for r in (r for r in recs if r["method"] == "rag_top3"):
        assert 0 < len(r["retrieved"]) <= 3 and r["shown"] == sorted(r["retrieved"])
        assert len(r["retrieval_scores"]) == len(r["retrieved"])
    for r in (r for r in recs if r["method"] == "oracle_turn"):
        assert r["shown"] == r["gold_idx"] and r["retrieved"] == []
        assert r["correct"] is True or r["type"] == "single-session-preference"  # its reference is a rubric


def test_the_summary_counts_each_method_under_the_benchmark(first_run):
    base, _, _ = first_run
    summary = read_summary(base / "run")
    assert summary["task"] == "evaluate" and list(summary["benchmarks"]) == ["synthetic"]
    bench = summary["benchmarks"]["synthetic"]
    assert list(bench["methods"]) == METHODS and bench["dataset"] == "synthetic"
    assert bench["resume_dropped"] == {"errors": 0, "torn_lines": 0}
    assert bench["judge"]["style"] == "longmemeval" and bench["judge"]["model"] == "standin"
    recs = records(base / "run")
    for name, s in bench["methods"].items():
        mine = [r for r in recs if r["method"] == name]
        assert (s["questions"], s["ok"], s["errors"]) == (3, 3, 0)
        assert s["accuracy"] == pytest.approx(sum(r["correct"] for r in mine) / 3)
    assert summary["llm"]["answer"]["calls"] == 6 and summary["llm"]["judge"]["calls"] == 6


def test_results_md_is_written_and_printed(first_run):
    base, _, out = first_run
    results = (base / "run" / "results.md").read_text()
    assert "## Accuracy (synthetic)" in results
    assert "| rag_top3 |" in results and "| oracle_turn |" in results
    assert "## Accuracy (synthetic)" in out.stdout and "| oracle_turn |" in out.stdout


def test_resume_keeps_finished_questions_and_redoes_errors_and_torn_lines(first_run, tmp_path):
    base, env, _ = first_run
    run_dir = tmp_path / "run"
    shutil.copytree(base / "run", run_dir)
    lines = (run_dir / "records.jsonl").read_text().splitlines()
    failed = json.loads(lines[1]) | {"status": "error", "error": "HTTP 500: boom"}
    lines[1] = json.dumps(failed)
    (run_dir / "records.jsonl").write_text("\n".join(lines) + '\n{"qid": "syn0')  # a torn last line
    out = run_cli(*SMALL, f"hydra.run.dir={run_dir}", "resume=true", env=env, timeout=300, standin=True)
    assert out.returncode == 0, out.stderr[-3000:]
    after = records(run_dir)
    keys = [(r["method"], r["qid"]) for r in after]
    assert sorted(keys) == sorted((m, q) for m in METHODS for q in ("syn000", "syn001", "syn002"))
    assert keys[-1] == ("rag_top3", "syn001")  # the failed question, redone and appended
    assert all(r["status"] == "ok" for r in after)
    before = [json.loads(x) for i, x in enumerate(lines) if i != 1]
    assert after[:-1] == before  # finished work kept as it was
    summary = read_summary(run_dir)
    assert summary["benchmarks"]["synthetic"]["resume_dropped"] == {"errors": 1, "torn_lines": 1}
    assert summary["llm"]["answer"]["calls"] == 1 and summary["llm"]["judge"]["calls"] == 1


def test_a_job_missing_something_stops_before_any_question(tmp_path):
    out = run_cli(
        *SMALL,
        "++llm.roles.judge.backend=endpoint",
        f"hydra.run.dir={tmp_path}",
        env={"LAZYMEM_CACHE": str(tmp_path / "cache")},
        timeout=300,
        standin=True,
    )
    assert out.returncode != 0
    assert "error: this job cannot start; missing:\n  - llm.roles.judge.base_url is not set" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "records.jsonl").exists() and not (tmp_path / "summary.json").exists()


def test_evaluate_in_process_returns_the_summary_and_reports_each_record(tmp_path, caplog):
    cfg = config(
        "method=oracle_turn",
        "data.loader.per_type=1",
        "data.limit=2",
        "latency.repeats=2",
        "llm=standin",
        STANDIN_SEARCHPATH,
        f"paths.cache={tmp_path / 'cache'}",
    )
    ds, methods = load_dataset(cfg.data), build_methods(cfg)
    seen = []
    with caplog.at_level(logging.WARNING), build_llms(cfg.llm, tmp_path / "servers") as llms:
        bench = evaluate(cfg, ds, methods, None, llms, tmp_path, on_record=seen.append)
        answers = llms.stats()["answer"]["calls"]
    assert "latency.warmup/repeats with llm.cache=true" in caplog.text  # repeats would be cache hits
    assert [r["qid"] for r in seen] == [q.id for q in ds.questions] == ["syn000", "syn001"]
    assert list(bench["methods"]) == ["oracle_turn"] and bench["methods"]["oracle_turn"]["ok"] == 2
    assert bench["judge"]["style"] == "longmemeval"
    assert answers == 4  # two timed passes over two questions; only the first is recorded
    assert len(records(tmp_path)) == 2
    runs = [json.loads(x) for x in (tmp_path / "latency_runs.jsonl").read_text().splitlines()]
    assert sorted((x["qid"], x["pass"]) for x in runs) == [("syn000", 1), ("syn001", 1)]
    assert (tmp_path / "results.md").read_text().startswith("## Accuracy (synthetic)")


def test_build_methods_takes_methods_or_else_the_one_method():
    assert [m.name for m in build_methods(config("method=rag_top50"))] == ["rag_top50"]
    both = build_methods(config(*SMALL[1:4]))
    assert [type(m) for m in both] == [RAG, OracleTurn] and [m.name for m in both] == METHODS


def test_method_names_must_be_unique():
    cfg = config("+method@methods.a=rag_top20", "+method@methods.b=rag", "methods.b.top_k=20")
    with pytest.raises(ValueError, match=r"^method names must be unique, got \['rag_top20', 'rag_top20'\]$"):
        build_methods(cfg)


def test_a_method_config_that_builds_no_method_is_refused_naming_its_key():
    cfg = config("+methods.odd._target_=types.SimpleNamespace", "+methods.odd.name=odd")
    with pytest.raises(TypeError) as err:
        build_methods(cfg)
    assert str(err.value) == (
        "method 'odd' (SimpleNamespace) lacks what lazymem.methods.base.Method declares: "
        "name, roles, needs_retrieval and async build(question, history, ctx)"
    )


def test_the_retriever_is_built_only_when_a_method_needs_it():
    cfg = config("method=oracle_turn", "retrieval=bm25")
    assert build_retriever(cfg, build_methods(cfg)) is None
    cfg = config(*SMALL[1:])
    retriever = build_retriever(cfg, build_methods(cfg))
    assert isinstance(retriever, HybridRetriever) and list(retriever.retrievers) == ["bm25"]
