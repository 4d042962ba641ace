"""task=main_table: without a GPU it stops at once listing everything missing; on the CPU (slow) every method
and table of the main table, every role on the LLM stand-in."""

import json

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from lazymem.conf import CONF_DIR
from lazymem.eval.summary import read_summary
from lazymem.tasks.evaluate import latency_passes

from helpers import MAIN_TABLE_METHODS, run_cli


def composed(experiment: str):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=[f"+experiment={experiment}"])


def test_only_longmemeval_runs_the_latency_protocols_passes():
    """Table 8 (the only latency table) is LongMemEval's: LoCoMo gets one pass, the evaluation itself, not
    3 warm-up + 3 timed passes (config: the plan task=main_table runs, composed)."""
    cfg = composed("main_table")
    plan = {name: latency_passes(cfg, name) for name in cfg.benchmarks}
    assert plan == {"longmemeval": (3, 3), "locomo": (0, 1)}
    assert latency_passes(composed("rehearsal_cpu"), "longmemeval") == (0, 1)
    # an experiment that names no latency benchmarks times every one (task=evaluate's nanomemory_depth)
    assert latency_passes(composed("nanomemory_depth"), "longmemeval") == (3, 3)


def test_main_table_without_gpu_stops_at_once_listing_everything(tmp_path):
    out = run_cli("+experiment=main_table", f"hydra.run.dir={tmp_path}", env={"DEEPSEEK_API_KEY": ""})
    assert out.returncode != 0
    err = out.stderr
    assert "this job cannot start; missing:" in err and "Traceback" not in err
    for needle in (
        "no GPU found",
        "llm.roles.memory.model",
        "llm.roles.memory_small.model",
        "export DEEPSEEK_API_KEY",
        "retrieval.reranker.model",
        "benchmarks.locomo.path",
    ):
        assert needle in err, needle
    assert not (tmp_path / "longmemeval").exists()  # no work started


# The main table's shape on CPU: every method and table, every role answered by the LLM stand-in
# (tests/standin.py). Real model servers are covered by tests/e2e/test_evaluate.py, tests/test_runner.py and
# tests/e2e/test_mem0.py (the golden path in docs/development.md).
SMALL_CPU = [
    "+experiment=main_table_cpu",
    "data@benchmarks.longmemeval=synthetic",
    "benchmarks.longmemeval.limit=1",
    "retrieval.n=5",
    "w=1",
    "methods.nanomemory.top_sessions=2",
]


@pytest.mark.slow
def test_cpu_main_table_on_synthetic_data(tmp_path):
    out = run_cli(
        *SMALL_CPU,
        "~benchmarks.locomo",
        # 6 messages: Mem0 ingests them in 3 adds
        "benchmarks.longmemeval.loader.sessions=3",
        "benchmarks.longmemeval.loader.turns=2",
        f"hydra.run.dir={tmp_path}",
        env={"LAZYMEM_CACHE": str(tmp_path / "cache")},
        timeout=900,
        standin=True,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    found = read_summary(tmp_path)
    assert found["task"] == "main_table" and list(found["benchmarks"]) == ["longmemeval"]
    methods = found["benchmarks"]["longmemeval"]["methods"]
    assert set(methods) == MAIN_TABLE_METHODS and all(s["ok"] == 1 for s in methods.values())
    assert found["llm"]["answer"]["calls"] >= len(MAIN_TABLE_METHODS)
    assert "### Table 1 (longmemeval)" in (tmp_path / "results.md").read_text()
    assert (tmp_path / "table1_longmemeval.csv").exists() and (tmp_path / "table7_memory_tokens.csv").exists()


@pytest.mark.slow
def test_cpu_main_table_end_to_end(tmp_path, locomo_file):
    out = run_cli(
        *SMALL_CPU,
        f"benchmarks.locomo.path={locomo_file}",
        "benchmarks.locomo.limit=1",
        # Mem0 would ingest the whole conversation (~600 adds)
        "~methods.mem0",
        f"hydra.run.dir={tmp_path}",
        env={"LAZYMEM_CACHE": str(tmp_path / "cache")},
        timeout=900,
        standin=True,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = read_summary(tmp_path)["benchmarks"]
    for bench in ("longmemeval", "locomo"):
        assert set(summary[bench]["methods"]) == MAIN_TABLE_METHODS - {"mem0"}
        recs = [json.loads(x) for x in (tmp_path / bench / "records.jsonl").read_text().splitlines()]
        assert len(recs) == len(MAIN_TABLE_METHODS) - 1
    assert summary["locomo"]["methods"]["oracle_session"]["not_applicable"] == 1
    assert summary["longmemeval"]["methods"]["oracle_session"]["ok"] == 1
    md = (tmp_path / "results.md").read_text()
    assert "### Table 1 (longmemeval)" in md and "### Table 7" in md and "### Table 8 (locomo)" in md
    # each benchmark is scored by its own judge; LoCoMo also by its own token F1
    assert summary["longmemeval"]["judge"]["max_tokens"] == 10
    assert summary["locomo"]["judge"]["style"] == "locomo"
    assert all(s["f1"] is not None for s in summary["locomo"]["methods"].values() if s["questions"])
    assert "| F1 |" in md.split("### Table 1 (locomo)")[1].split("###")[0]
