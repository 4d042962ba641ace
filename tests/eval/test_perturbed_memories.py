"""Table 12 (paper Appendix E.1): the perturbed memories, their summary, the experiment configs, and a CPU run
end to end through the CLI and task=report."""

import csv
import json

import pytest
from hydra import compose, initialize_config_dir

from lazymem.conf import CONF_DIR as CONF
from lazymem.eval.perturbed_memories import summarize, variant_names, variants
from lazymem.eval.summary import read_summary
from lazymem.tracking import outputs

from helpers import run_cli


def composed(*overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def by_name(vs):
    out = {}
    for v in vs:
        out.setdefault(v.name, []).append(v.idx)
    return out


def test_every_variant_of_a_two_gold_question():
    vs = by_name(variants([4, 9], pool=[1, 2, 4, 5, 6, 7, 8], add=[1, 5], samples=3, seed="q"))
    assert vs["full_gold"] == [(4, 9)]
    assert vs["drop_one_gold"] == [(9,), (4,)]  # one deletion per gold message
    assert vs["drop_all_gold"] == [()]
    assert vs["add_all_nongold"] == [(1, 2, 4, 5, 6, 7, 8, 9)]  # gold in the pool is not added twice
    for k in (1, 5):
        draws = vs[f"add_{k}_nongold"]
        assert len(draws) == 3
        for idx in draws:
            assert list(idx) == sorted(idx) and {4, 9} <= set(idx)  # chronological, gold kept
            assert len(set(idx) - {4, 9}) == k and set(idx) - {4, 9} <= {1, 2, 5, 6, 7, 8}
    assert list(vs) == variant_names([1, 5])


def test_random_additions_are_reproducible_per_seed():
    one = variants([3], pool=range(40), add=[5], samples=3, seed="0:q1")
    assert one == variants([3], pool=range(40), add=[5], samples=3, seed="0:q1")
    assert one != variants([3], pool=range(40), add=[5], samples=3, seed="0:q2")


def test_an_addition_larger_than_the_pool_takes_it_once():
    vs = by_name(variants([3], pool=[1, 2, 3], add=[5], samples=3, seed="q"))
    assert vs["add_5_nongold"] == [(1, 2, 3)]


def _rec(qid, variant, correct, tokens=100, status="ok", sample=0):
    return {"qid": qid, "variant": variant, "method": f"{variant}/{sample}", "correct": correct,
            "input_tokens": tokens, "memory_tokens": tokens - 50, "status": status}  # fmt: skip


def test_summary_averages_within_question_then_pairs_with_full_gold():
    records = [
        _rec("a", "full_gold", True),
        _rec("b", "full_gold", True),
        _rec("c", "full_gold", False),
        # a: one of two deletions still answers; b: both fail; c: answered after losing a message
        _rec("a", "drop_one_gold", True, sample=0),
        _rec("a", "drop_one_gold", False, sample=1),
        _rec("b", "drop_one_gold", False, sample=0),
        _rec("b", "drop_one_gold", False, sample=1),
        _rec("c", "drop_one_gold", True, sample=0),
        _rec("a", "drop_all_gold", False, tokens=60),
        _rec("b", "drop_all_gold", None),  # unlabelled: not scored
        _rec("c", "drop_all_gold", False, status="error", tokens=60),
    ]
    s = summarize(records, ["full_gold", "drop_one_gold", "drop_all_gold"], resamples=500)
    full, drop1, drop_all = (s["variants"][k] for k in ("full_gold", "drop_one_gold", "drop_all_gold"))
    assert full["accuracy"] == pytest.approx(2 / 3) and full["delta"] is None and full["c_to_i"] is None
    assert drop1["accuracy"] == pytest.approx((0.5 + 0 + 1) / 3)
    assert drop1["delta"]["mean"] == pytest.approx((0.5 + 0 + 1) / 3 - 2 / 3)
    assert drop1["c_to_i"] == pytest.approx((0.5 + 1) / 2) and drop1["c_to_i_questions"] == 2
    assert drop_all["questions"] == 1 and drop_all["input_tokens"] == 60  # only a is scored
    assert drop_all["delta"]["mean"] == -1
    assert (s["errors"], s["unjudged"], s["questions"]) == (1, 1, 3)


def test_paper_experiment_is_the_papers_protocol():
    cfg = composed("+experiment=perturbation")
    assert cfg.task == "perturbation"
    assert (cfg.data.name, cfg.data.split) == ("longmemeval", "val")
    assert cfg.llm.common.served_name == "qwen3-32b" and cfg.llm.roles.judge.served_name == "deepseek-v4-pro"
    assert cfg.retrieval.n == 50 and cfg.w == 2
    assert "reranker" in cfg.retrieval and cfg.retrieval.reranker.model
    assert list(cfg.perturbation.add) == [1, 5]


def test_cpu_variant_uses_bundled_models_and_a_few_questions():
    cfg = composed("+experiment=perturbation_cpu")
    assert cfg.task == "perturbation" and cfg.llm.common.backend == "llamacpp"
    assert cfg.data.name == "synthetic" and cfg.data.limit == 2


@pytest.mark.slow
def test_perturbation_on_cpu_and_table12(tmp_path):
    run_dir = tmp_path / "run"
    env = {"LAZYMEM_CACHE": str(tmp_path / "cache")}
    out = run_cli(
        "+experiment=perturbation_cpu",
        "data.limit=1",
        f"hydra.run.dir={run_dir}",
        env=env,
        timeout=900,
        standin=True,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    assert {r["variant"] for r in records} == set(variant_names([1, 5]))
    assert all(r["status"] == "ok" for r in records)
    full = {r["qid"]: r for r in records if r["variant"] == "full_gold"}
    for r in records:  # every perturbation is full gold minus or plus messages of the same question
        gold = set(full[r["qid"]]["shown"])
        shown = set(r["shown"])
        assert shown <= gold if "drop" in r["variant"] else shown >= gold
    table = read_summary(run_dir)["tables"]["perturbation"]
    assert table["questions"] == 1 and table["errors"] == 0
    rows = table["variants"]
    assert rows["drop_all_gold"]["input_tokens"] < rows["full_gold"]["input_tokens"]
    assert rows["add_all_nongold"]["input_tokens"] > rows["add_1_nongold"]["input_tokens"]
    # what W&B gets from the run directory: Table 12's numbers as summary keys, the table, the records
    logged = outputs.outputs_summary(run_dir)
    assert logged["perturbation/variants/drop_one_gold/accuracy"] == rows["drop_one_gold"]["accuracy"]
    assert (run_dir / "table12_ours.csv").is_file() and "records" in outputs.records_files(run_dir)

    report = tmp_path / "report"
    r = run_cli("task=report", f"report.inputs=[{run_dir}]", f"hydra.run.dir={report}")
    assert r.returncode == 0, r.stderr[-3000:]
    with open(report / "table12_run.csv") as f:
        csv_rows = list(csv.DictReader(f))
    assert [c["memory"] for c in csv_rows] == variant_names([1, 5])
    assert csv_rows[1]["Δ (pp)_paper"] == "-59.5"
    assert "Table 12" in (report / "report.md").read_text()
