"""task=perturbation (Table 12): the paper's and the CPU experiment's configs, and a CPU run end to end
through the CLI and task=report (slow)."""

import csv
import json

import pytest
from hydra import compose, initialize_config_dir

from lazymem.conf import CONF_DIR as CONF
from lazymem.eval.perturbed_memories import variant_names
from lazymem.eval.summary import read_summary
from lazymem.tracking import outputs

from helpers import run_cli


def composed(*overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=list(overrides))


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
