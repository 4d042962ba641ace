"""What a run directory gives W&B (lazymem/tracking/outputs.py): flattened summaries, record rows, images
and artifacts."""

from __future__ import annotations

import json
import logging

import matplotlib

from lazymem.eval.summary import summary
from lazymem.tracking import outputs

from helpers_runs import (
    TRACKED_RECORDS,
    tracked_bench,
    tracked_summary,
)

matplotlib.use("Agg")


def test_summary_is_flattened_per_benchmark_method_type_and_stage():
    flat = outputs.flatten_summary(tracked_summary())
    assert flat["synthetic/lazymem/accuracy"] == 0.5
    assert flat["synthetic/lazymem/by_type/multi-session/accuracy"] == 1.0
    assert flat["synthetic/lazymem/by_type/knowledge-update/accuracy"] == 0.0
    assert flat["synthetic/lazymem/latency/total/p95"] == 2.0
    assert flat["synthetic/lazymem/latency/retrieval/mean"] == 0.1
    assert flat["synthetic/rag/latency/answer/median"] == 1.0 and flat["synthetic/rag/errors"] == 1
    assert flat["synthetic/rag/memory_tokens/mean"] == 9000 and flat["synthetic/lazymem/memory_tokens/n"] == 2
    assert flat["synthetic/lazymem/construction/gold_decided"] == 0
    assert flat["llm/answer/calls"] == 4 and flat["synthetic/dataset"] == "synthetic"
    assert flat["synthetic/judge/model"] == "deepseek-v4-pro" and flat["task"] == "evaluate"
    assert not any("error_messages" in k or "accuracy_by_type" in k for k in flat)
    assert all(isinstance(v, bool | int | float | str) for v in flat.values())
    both = outputs.flatten_summary(
        tracked_summary(synthetic=tracked_bench(), locomo=tracked_bench(TRACKED_RECORDS[2:]))
    )
    assert both["locomo/rag/latency/total/p95"] == 1.5 and "locomo/lazymem/accuracy" not in both
    assert both["synthetic/lazymem/by_type/multi-session/accuracy"] == 1.0
    table = outputs.flatten_summary(summary("perturbation", tables={"perturbation": {"variants": {"a": 1}}}))
    assert table == {"task": "perturbation", "perturbation/variants/a": 1}


def test_model_free_metrics_are_flattened_like_accuracy():
    bench = tracked_bench()
    bench["methods"]["lazymem"] |= {"f1": 0.4, "f1_by_type": {"temporal": 0.25, "single-hop": None}}
    flat = outputs.flatten_summary(tracked_summary(locomo=bench))
    assert flat["locomo/lazymem/f1"] == 0.4 and flat["locomo/lazymem/by_type/temporal/f1"] == 0.25
    assert "locomo/lazymem/by_type/single-hop/f1" not in flat and not any("f1_by_type" in k for k in flat)


def test_record_rows_are_a_fixed_column_subset_with_clipped_text():
    rows = outputs.record_rows(TRACKED_RECORDS, max_records=3)
    assert len(rows) == 3 and all(len(r) == len(outputs.RECORD_COLUMNS) for r in rows)
    row = dict(zip(outputs.RECORD_COLUMNS, rows[0], strict=True))
    assert row["method"] == "lazymem" and row["qid"] == "q1" and row["type"] == "multi-session"
    assert row["correct"] is True and row["latency_s"] == 2.0 and row["memory_tokens"] == 100
    assert len(row["answer"]) == outputs.MAX_CHARS and row["answer"].endswith("…")
    err = dict(zip(outputs.RECORD_COLUMNS, outputs.record_row(TRACKED_RECORDS[3]), strict=True))
    assert err["status"] == "error" and err["error"].startswith("TimeoutError") and err["correct"] is None
    assert outputs.record_row({"reference": 7, "latency_s": 1.5})[4:9] == ["7", None, None, None, 1.5]


def test_outputs_summary_reads_every_file_and_the_returned_scalars(run_dir):
    flat = outputs.outputs_summary(run_dir, {"questions": 8, "nested": {"a": 1}, "plots": ["x.png"]})
    assert flat["questions"] == 8 and "nested/a" not in flat and "plots" not in flat
    assert flat["coverage/radii/2/all_at_n"] == 0.75 and flat["synthetic/lazymem/accuracy"] == 0.5
    assert list(outputs.images(run_dir)) == ["plots/tradeoff"]
    (run_dir / "wandb" / "run").mkdir(parents=True)
    (run_dir / "wandb" / "run" / "media.png").write_bytes(b"")
    assert list(outputs.images(run_dir)) == ["plots/tradeoff"]
    (run_dir / "synthetic").mkdir()
    (run_dir / "synthetic" / "records.jsonl").write_text("")
    (run_dir / "model").mkdir()  # not a benchmark: never scanned
    (run_dir / "model" / "records.jsonl").write_text("")
    assert list(outputs.records_files(run_dir)) == ["records", "synthetic/records"]


def test_a_summary_of_an_unknown_shape_is_one_warning_naming_the_file(run_dir, caplog):
    (run_dir / "summary.json").write_text(json.dumps({"dataset": "x", "methods": {}}))
    with caplog.at_level(logging.WARNING, logger="lazymem"):
        flat = outputs.outputs_summary(run_dir, {"questions": 1})
    assert (
        flat["questions"] == 1 and "coverage/n" in flat and not any(k.startswith("synthetic/") for k in flat)
    )
    assert f"{run_dir / 'summary.json'}: not a lazymem summary (no 'task'" in caplog.text


def test_artifacts_hold_records_results_and_a_checkpoint_reference(run_dir):
    (run_dir / "synthetic").mkdir()
    (run_dir / "synthetic" / "records.jsonl").write_text("")
    (run_dir / "synthetic" / "results.md").write_text("")
    (run_dir / "servers").mkdir()
    (run_dir / "servers" / "llama.log").write_text("")
    ckpt = run_dir.parent / "ckpt"
    ckpt.mkdir()
    specs = {a.kind: a for a in outputs.artifacts(run_dir, {"checkpoint": str(ckpt)})}
    assert set(specs["records"].files) == {"records.jsonl", "synthetic/records.jsonl"}
    assert set(specs["results"].files) == {
        "summary.json", "meta.json", "coverage.json", "table1.csv", "tradeoff.png", "synthetic/results.md"
    }  # fmt: skip
    assert specs["model"].references == [ckpt.resolve()] and not specs["model"].files
    assert "model" not in {a.kind for a in outputs.artifacts(run_dir, {"checkpoint": "/nonexistent"})}
