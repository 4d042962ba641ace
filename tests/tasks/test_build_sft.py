"""task=build_sft end to end on the CPU (slow): the teacher role on the LLM stand-in, and on an endpoint that
takes response_format text and json_object only, like DeepSeek's API; the gold teacher
(train.sft.teacher=gold), which calls no LLM, and its preflight."""

from __future__ import annotations

import json

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from lazymem.conf import CONF_DIR
from lazymem.construct.decisions import check_decisions
from lazymem.data import load_dataset
from lazymem.tasks.build_sft import problems
from lazymem.train.sft_teachers import DROP_REASON, KEEP_REASON

from helpers import run_cli
from standin import StandinServer

GOLD = ("train.sft.teacher=gold", "train.sft.with_reasoning=false")
NOBODY = "http://127.0.0.1:9/v1"  # the discard port: a call to the teacher role would fail


@pytest.mark.slow
def test_build_sft_end_to_end(tmp_path):
    proc = run_cli(
        "+experiment=build_sft_cpu",
        "train.sft.n_questions=2",
        "retrieval.n=3",
        "w=1",
        "train.sft.grpo_response_cap=8",  # below every target: the length warning
        f"hydra.run.dir={tmp_path}",
        timeout=600,
        standin=True,  # the teacher on the LLM stand-in: the data pipeline, not a model
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    st = json.loads((tmp_path / "sft_stats.json").read_text())
    assert st["questions"] == 2 and st["windows"] > 0
    lengths = st["target_tokens"]  # Qwen tokens of the balanced targets
    assert lengths["p50"] <= lengths["p95"] <= lengths["max"] and lengths["cap"] == 8
    assert lengths["over_cap"] == st["balanced"] and lengths["over_cap_share"] == 1.0
    assert f"SFT targets: p95 {lengths['p95']} tokens, above GRPO's response cap of 8" in proc.stdout
    assert st["annotated_valid"] + st["discarded_total"] == st["windows"]
    data = json.loads((tmp_path / "lazymem_sft.json").read_text())
    assert len(data) == st["balanced"]
    assert "lazymem_sft" in json.loads((tmp_path / "dataset_info.json").read_text())
    y = yaml.safe_load((tmp_path / "sft.yaml").read_text())
    assert y["dataset_dir"] == str(tmp_path.resolve()) and y["template"] == "qwen3"
    assert json.loads((tmp_path / "ds_z2_config.json").read_text())["zero_optimization"]["stage"] == 2
    # the validation split annotated the same way, for the choice of the epoch
    val = st["val"]
    assert val["questions"] == 1 and val["annotated_valid"] + val["discarded_total"] == val["windows"] > 0
    if val["balanced"]:
        assert len(json.loads((tmp_path / "lazymem_sft_val.json").read_text())) == val["balanced"]
        assert y["eval_dataset"] == "lazymem_sft_val" and y["load_best_model_at_end"] is True
    else:
        assert "eval_dataset" not in y


@pytest.mark.slow
@pytest.mark.parametrize("dialect", ["deepseek", "openai"])
def test_build_sft_against_a_deepseek_style_teacher(tmp_path, dialect):
    """A teacher endpoint that, like DeepSeek's API, takes response_format text and json_object only: the
    deepseek dialect yields SFT data; a dialect that sends json_schema stops at the first call, clearly."""
    with StandinServer("deepseek-v4-flash", formats=("text", "json_object")) as teacher:
        proc = run_cli(
            "+experiment=build_sft_cpu",
            "train.sft.n_questions=2",
            "retrieval.n=3",
            "+llm.roles.teacher.backend=endpoint",
            f"+llm.roles.teacher.base_url={teacher.base_url}",
            f"+llm.roles.teacher.dialect={dialect}",
            "+llm.roles.teacher.served_name=deepseek-v4-flash",
            f"hydra.run.dir={tmp_path}",
            standin=True,  # the other roles
        )
    if dialect == "deepseek":
        assert proc.returncode == 0, proc.stderr[-3000:]
        st = json.loads((tmp_path / "sft_stats.json").read_text())
        # every call answered with parseable decisions (the stand-in drops gold it shares no word with)
        assert st["windows"] > 0 and st["annotated_valid"] > 0
        assert set(st["discarded"]) <= {"dropped_gold"} or all(
            st["discarded"][r] == 0 for r in ("call_error", "unparsable", "schema", "wrong_count")
        )
        assert len(json.loads((tmp_path / "lazymem_sft.json").read_text())) == st["balanced"]
    else:
        assert proc.returncode == 1 and "Traceback" not in proc.stderr
        assert "refused response_format 'json_schema'" in proc.stderr and "dialect: deepseek" in proc.stderr
        assert not (tmp_path / "lazymem_sft.json").exists()


@pytest.mark.slow
def test_build_sft_with_the_gold_teacher_calls_no_llm(tmp_path):
    """train.sft.teacher=gold: every target is the evidence labels' (gold KEEP with its text, the rest DROP),
    through the same gate, balance and files. The teacher role points where nothing listens: a call would
    be a call_error discard. No server starts."""
    proc = run_cli(
        "+experiment=build_sft_cpu",
        *GOLD,
        "retrieval.n=3",
        "w=1",
        "+llm.roles.teacher.backend=endpoint",
        f"+llm.roles.teacher.base_url={NOBODY}",
        f"hydra.run.dir={tmp_path}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (tmp_path / "servers").exists()  # no model server started
    st = json.loads((tmp_path / "sft_stats.json").read_text())
    assert st["windows"] > 0 and st["annotated_valid"] == st["windows"] and st["discarded_total"] == 0
    assert st["with_reasoning"] == 0 and st["val"]["discarded_total"] == 0
    cfg = OmegaConf.load(tmp_path / "config.yaml")
    assert cfg.train.sft.teacher == {
        "_target_": "lazymem.train.sft_teachers.GoldTeacher",
        "gold_max_chars": None,
    }
    ds = load_dataset(OmegaConf.merge(cfg.data, {"split": None}))  # every question, both splits'
    questions = {q.id: q for q in ds.questions}
    records = [json.loads(line) for line in (tmp_path / "annotations.jsonl").read_text().splitlines()]
    balanced = json.loads((tmp_path / "lazymem_sft.json").read_text())
    val_file = tmp_path / "lazymem_sft_val.json"
    val = json.loads(val_file.read_text()) if val_file.exists() else []
    assert len(balanced) == st["balanced"] and records and balanced
    for record in records + balanced + val:
        q = questions[record["question_id"]]
        messages = ds.history(q).messages
        target = record["messages"][-1]
        assert target["role"] == "assistant" and check_decisions(target["content"], len(record["window"])).ok
        for i, d in zip(record["window"], json.loads(target["content"]), strict=True):
            if i in q.gold_idx:
                assert d == {"op": "KEEP", "compressed_content": messages[i].text, "reason": KEEP_REASON}
            else:
                assert d == {"op": "DROP", "compressed_content": "", "reason": DROP_REASON}
    train = yaml.safe_load((tmp_path / "sft.yaml").read_text())
    assert train["dataset"] == "lazymem_sft" and train["enable_thinking"] is False


@pytest.mark.slow
def test_the_gold_teacher_with_reasoning_stops_before_any_work(tmp_path):
    proc = run_cli("+experiment=build_sft_cpu", "train.sft.teacher=gold", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "train.sft.with_reasoning=false" in proc.stderr
    assert not (tmp_path / "sft_stats.json").exists()


def test_preflight_asks_for_the_teacher_role_only_when_an_llm_teaches(monkeypatch):
    """The paper's set-up without DEEPSEEK_API_KEY: the LLM teacher is a problem, the gold one needs none."""
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        llm = compose("config", overrides=["+experiment=build_sft"])
        gold = compose("config", overrides=["+experiment=build_sft", *GOLD])
        thinking = compose("config", overrides=["+experiment=build_sft", "train.sft.teacher=gold"])
    assert any("llm.roles.teacher" in p for p in problems(llm))
    assert not any("llm.roles.teacher" in p for p in problems(gold))
    assert not any("with_reasoning" in p for p in problems(gold))
    assert any("train.sft.with_reasoning=false" in p for p in problems(thinking))
