"""task=construction_eval: a memory model's KEEP/DROP decisions on the RL validation windows, scored against
the gold labels, with CIs over questions (lazymem/tasks/construction_eval.py)."""

from __future__ import annotations

import json

from lazymem.construct.decisions import check_decisions
from lazymem.eval.summary import read_summary
from lazymem.tasks.construction_eval import aggregate, per_question, score

from helpers import run_cli

KEEP = {"op": "KEEP", "compressed_content": "x", "reason": "r"}
DROP = {"op": "DROP", "compressed_content": "", "reason": "r"}


def test_a_window_is_scored_by_the_strict_gate_and_an_invalid_reply_keeps_and_drops_nothing():
    gold = [True, False, False]
    ok = score(gold, json.dumps([KEEP, KEEP, DROP]), eta=0.9, texts=["x y", "z", "w"])
    assert (ok["tp"], ok["fn"], ok["fp"], ok["dropped"], ok["nongold"]) == (1, 0, 1, 1, 2)
    assert ok["format_ok"] == 1.0 and abs(ok["reward"] - (0.9 * 1 + 0.1 * 0.5)) < 1e-9
    bad = score(gold, json.dumps([KEEP, DROP]), eta=0.9, texts=["x", "y", "z"])  # two decisions, 3 messages
    assert bad["gate_error"] == "wrong_count" and bad["format_ok"] == 0.0 and bad["reward"] == 0.0
    assert (bad["tp"], bad["fn"], bad["fp"], bad["dropped"]) == (0, 1, 0, 0)
    assert (ok["words_found"], ok["words_kept"]) == (1, 2) and bad["words_kept"] == 0  # "x" in "x y", not "z"


def test_kept_text_of_the_models_own_is_seen_where_gold_kept_is_not():
    """The failure a gold-kept score cannot see: the right message kept, with text it does not hold."""
    gold, texts = (
        [True, False],
        ["Say hello to Clover, the rabbit I just adopted!", "How often should I water?"],
    )
    copy = {"op": "KEEP", "compressed_content": "Clover, the rabbit I adopted", "reason": "r"}
    own = {"op": "KEEP", "compressed_content": "I am not sure what I did", "reason": "r"}
    rows = [
        {"question_id": "a", "seconds": 1.0, **score(gold, json.dumps([copy, DROP]), 0.9, texts)},
        {"question_id": "b", "seconds": 1.0, **score(gold, json.dumps([own, DROP]), 0.9, texts)},
    ]
    q = per_question(rows)
    assert q["a"]["gold_kept"] == q["b"]["gold_kept"] == 1.0
    assert q["a"]["kept_words_in_source"] == 1.0 and q["b"]["kept_words_in_source"] == 2 / 7  # "i" twice


def test_questions_pool_their_windows_and_the_means_are_over_questions():
    rows = [
        {
            "question_id": "a",
            "seconds": 1.0,
            **score([True, False], json.dumps([KEEP, DROP]), 0.9, ["x", "y"]),
        },
        {"question_id": "a", "seconds": 2.0, **score([False], json.dumps([KEEP]), 0.9, ["y"])},
        {"question_id": "b", "seconds": 4.0, **score([True], "not json", 0.9, ["x"])},
        {"question_id": "c", "seconds": 1.0, **score([False], json.dumps([DROP]), 0.9, ["x"])},
    ]
    q = per_question(rows)
    assert q["a"]["gold_kept"] == 1.0 and q["a"]["nongold_dropped"] == 0.5 and q["a"]["f1"] == 2 / 3
    assert q["a"]["seconds"] == 3.0 and q["b"]["gold_kept"] == 0.0 and q["b"]["format_ok"] == 0.0
    assert q["c"]["gold_kept"] is None and q["c"]["f1"] is None  # no gold: left out of the gold metrics
    out = aggregate(rows)
    assert out["gold_kept"]["n"] == 2 and out["gold_kept"]["mean"] == 0.5
    assert out["nongold_dropped"]["n"] == 2 and out["nongold_dropped"]["mean"] == 0.75
    assert out["format_ok"]["n"] == 3 and out["windows"] == 4 and out["questions"] == 3
    assert out["gold_kept"]["low"] <= 0.5 <= out["gold_kept"]["high"]
    # a: "x" kept from "x", "x" kept from "y" (1 of 2); b invalid and c all DROP: nothing kept, left out
    assert out["kept_words_in_source"]["n"] == 1 and out["kept_words_in_source"]["mean"] == 0.5


def test_the_cli_scores_every_validation_window_and_the_report_tables_it(tmp_path):
    run_dir = tmp_path / "eval"
    proc = run_cli(
        "+experiment=construction_eval_cpu", "++stage=sft", f"hydra.run.dir={run_dir}", standin=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(x) for x in (run_dir / "replies.jsonl").read_text().splitlines()]
    assert lines and all(line["error"] is None for line in lines)
    for line in lines:  # each window's counts are what the gate makes of its own reply
        gate = check_decisions(line["reply"], len(line["gold"]))
        assert gate.ok and line["format_ok"] == 1.0
        kept = [d.op == "KEEP" for d in gate.decisions]
        assert line["tp"] == sum(g and k for g, k in zip(line["gold"], kept, strict=True))
    result = json.loads((run_dir / "construction.json").read_text())
    assert result["stage"] == "sft" and result["windows"] == len(lines) and result["call_errors"] == 0
    assert result["counts"]["tp"] == sum(line["tp"] for line in lines)
    assert read_summary(run_dir)["tables"]["construction"]["windows"] == len(lines)
    report = tmp_path / "report"
    proc = run_cli("task=report", f"report.inputs=[{run_dir}]", f"hydra.run.dir={report}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    md = (report / "report.md").read_text()
    assert "Table 3 (mini)" in md and (report / "table3_construction.csv").is_file()
    assert "Kept words in source" in md
