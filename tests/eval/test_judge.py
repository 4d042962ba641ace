import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from lazymem.conf import CONF_DIR
from lazymem.data.schema import Question
from lazymem.eval.f1 import LocomoF1
from lazymem.eval.judge import OFFICIAL_FILE, Judge, describe_judge, judge_style
from lazymem.eval.summary import read_summary
from lazymem.llm.client import Decoding
from lazymem.llm.completion import Completion

from helpers import run_cli

CONF = CONF_DIR


def question(**kw):
    base = dict(
        id="q", type="temporal-reasoning", text="How many days ago?", answer="19 days", history_id="h"
    )
    return Question(**(base | kw))


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("yes", True),
        ("Yes.", True),
        ("no", False),
        ("NO, the reply is wrong", False),
        ("<think>maybe yes? no wait</think>\nno", False),
        ("<think>hmm</think> Yes", True),
        # the official rule: any reply without "yes" is incorrect, and "yes" anywhere counts
        ("The answer is correct.", False),
        ("", False),
        ("No. Yes would be wrong here", True),
        ("EYES", True),
    ],
)
def test_longmemeval_labels_follow_the_official_rule(text, label):
    assert lme_prompts().label(Completion(text).text) is label  # thinking split off by the reply


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("CORRECT", True),
        ('{"label": "CORRECT"}', True),
        ("WRONG", False),
        ("Incorrect.", False),
        ("<think>is it correct?</think>WRONG", False),
        ("yes", None),
    ],
)
def test_locomo_labels(text, label):
    assert locomo_prompts().label(Completion(text).text) is label


def lme_prompts(official_src=None):
    return judge_style("longmemeval", "judge_longmemeval", "judge_longmemeval_rules", official_src)


def locomo_prompts(prompt="judge_locomo"):
    return judge_style("locomo", prompt)


def test_rules_follow_question_type_and_abstention():
    prompts = lme_prompts()
    temporal = prompts.messages(question(), "18 days")[0]["content"]
    assert "off by one" in temporal and "18 days" in temporal and "19 days" in temporal
    update = prompts.messages(question(type="knowledge-update"), "x")[0]["content"]
    assert "updated value" in update
    pref = prompts.messages(question(type="single-session-preference"), "x")[0]["content"]
    assert "rubric" in pref
    abst = prompts.messages(question(type="multi-session", abstention=True), "x")[0]["content"]
    assert "not available" in abst
    plain = prompts.messages(question(type="multi-session"), "x")[0]["content"]
    assert "only part" in plain and "off by one" not in plain
    locomo = locomo_prompts().messages(question(), "x")[0]["content"]
    assert "CORRECT or WRONG" in locomo and "any format" in locomo


def test_a_judge_is_declared_whole_by_the_benchmark():
    with pytest.raises(ValueError, match="declares no judge"):
        Judge.from_config(FakeClient("yes"), OmegaConf.create({"name": "toy"}))  # never a silent default
    with pytest.raises(ValueError, match="declares no judge"):
        Judge.from_config(FakeClient("yes"), OmegaConf.create({"name": "toy", "judge": "locomo"}))
    with pytest.raises(ValueError, match="'exact-match': allowed values are longmemeval, locomo"):
        judge_style("exact-match", "judge_locomo")
    with pytest.raises(ValueError, match="not a subclass of lazymem.eval.judge.JudgeStyle"):
        judge_style("json.JSONDecoder", "judge_locomo")
    with pytest.raises(ValueError, match="needs `rules`"):
        judge_style("longmemeval", "judge_longmemeval")
    with pytest.raises(ValueError, match="takes none"):
        judge_style("locomo", "judge_locomo", official_src="/somewhere")
    assert lme_prompts().version == lme_prompts().version != locomo_prompts().version


def test_prompt_override_by_path(tmp_path):
    custom = tmp_path / "mine.txt"
    custom.write_text("Q={question} A={answer} R={response}")
    prompts = locomo_prompts(str(custom))
    assert prompts.messages(question(), "r")[0]["content"] == "Q=How many days ago? A=19 days R=r"
    assert prompts.version != locomo_prompts().version
    assert prompts.source() == str(custom.resolve()) and locomo_prompts().source() == "lazymem"


def test_contains_reference_cross_check():
    from lazymem.eval.judge import contains_reference

    q = question(type="single-session-user", answer="Clover")
    assert contains_reference(q, "You named her Clover.") is True
    assert contains_reference(q, "Her name is Daisy.") is False
    assert contains_reference(question(answer="$45"), "It costs $45 a month now.") is True
    assert contains_reference(question(answer="3"), "You bought 3 gadgets") is True
    assert contains_reference(question(answer="x", abstention=True), "x") is None
    assert contains_reference(question(type="single-session-preference", answer="x"), "x") is None


FAKE_OFFICIAL = """import os
import backoff_is_not_installed_here
from openai import OpenAI

GREETING = 'Grade this'
client = OpenAI()


@backoff_is_not_installed_here.on_exception(Exception)
def call(client, **kwargs):
    return client.chat.completions.create(**kwargs)


def get_anscheck_prompt(task, question, answer, response, abstention=False):
    kind = 'abstention' if abstention else task
    return f'{GREETING} [{kind}] Q={question} A={answer} R={response}'


if __name__ == '__main__':
    raise SystemExit('the script part must not run')
"""


def fake_checkout(root: Path, text: str = FAKE_OFFICIAL) -> Path:
    path = root / OFFICIAL_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_official_prompts_come_from_the_users_checkout(tmp_path):
    path = fake_checkout(tmp_path)
    prompts = lme_prompts(str(tmp_path))
    text = prompts.messages(question(), "18 days")[0]["content"]
    assert text == "Grade this [temporal-reasoning] Q=How many days ago? A=19 days R=18 days"
    abst = prompts.messages(question(abstention=True), "unknown")[0]["content"]
    assert abst.startswith("Grade this [abstention]")
    assert prompts.source() == f"official:{path.resolve()}"
    version = prompts.version
    assert version != lme_prompts().version
    fake_checkout(tmp_path, FAKE_OFFICIAL.replace("Grade this", "Grade that"))
    assert lme_prompts(str(tmp_path)).version != version  # the file's hash


def test_official_prompts_fail_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"official_src=.*evaluate_qa\.py not found"):
        lme_prompts(str(tmp_path))
    fake_checkout(tmp_path, "import openai\n\ndef other():\n    return 1\n")
    with pytest.raises(ValueError, match=r"defines no get_anscheck_prompt\(\)"):
        lme_prompts(str(tmp_path))


class FakeClient:
    def __init__(self, reply: str):
        self.reply, self.calls = reply, []
        self.cfg = SimpleNamespace(
            served_name="judge-model", model_id="", decoding=Decoding(temperature=0.0, max_tokens=256)
        )

    async def chat(self, messages, **kwargs):
        self.calls.append(kwargs)
        return SimpleNamespace(text=self.reply, error=None, latency_s=0.01)


def compose_paper(*overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        return compose("config", overrides=["+experiment=main_table", *overrides])


def test_each_benchmark_gets_its_declared_judge_and_budget(tmp_path):
    cfg = compose_paper()
    client = FakeClient("Yes")
    lme = Judge.from_config(client, cfg.benchmarks.longmemeval)
    correct, raw, _ = asyncio.run(lme(question(), "19 days"))
    assert (correct, raw) == (True, "Yes")
    assert client.calls[-1]["max_tokens"] == 10  # the official script's budget, as a decoding override
    ident = lme.identity
    assert ident["style"] == "longmemeval" and ident["prompts"] == "lazymem" and ident["max_tokens"] == 10
    assert ident["model"] == "judge-model" and "contains 'yes'" in ident["decision_rule"]
    assert ident["metrics"] == []
    locomo = Judge.from_config(FakeClient("CORRECT"), cfg.benchmarks.locomo)
    assert locomo.style.name == "locomo" and locomo.identity["metrics"] == ["f1"]
    assert locomo.identity["max_tokens"] == 256  # null budget: the judge role's own
    asyncio.run(locomo(question(type="single-hop"), "x"))
    assert "max_tokens" not in locomo.client.calls[-1]
    single = question(type="single-hop", answer="a red bicycle")
    assert locomo.scores(single, "A red bicycle!") == {"f1": 1.0}
    assert locomo.scores(single, "") == {"f1": 0.0}
    fake_checkout(tmp_path)
    cfg = compose_paper(f"benchmarks.longmemeval.judge.official_src={tmp_path}")
    official = Judge.from_config(FakeClient("no"), cfg.benchmarks.longmemeval)
    assert official.style.name == "longmemeval" and official.identity["prompts"].startswith("official:")
    assert len(official.identity["prompts_sha256"]) == 64
    line = describe_judge(official.identity)
    assert "judge-model" in line and "official:" in line and "max_tokens 10" in line


@pytest.mark.slow
def test_cli_runs_record_their_judge_and_score_locomo_f1(tmp_path, locomo_file):
    common = [
        "task=evaluate",
        "method=oracle_turn",
    ]
    env = {"LAZYMEM_CACHE": str(tmp_path / "cache")}
    out = run_cli(
        *common,
        "data=locomo",
        f"data.path={locomo_file}",
        "data.limit=2",
        f"hydra.run.dir={tmp_path}/locomo",
        env=env,
        standin=True,  # answer and judge on the LLM stand-in: what is recorded and scored, not a model
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (summary,) = read_summary(tmp_path / "locomo")["benchmarks"].values()
    assert summary["judge"]["style"] == "locomo" and summary["judge"]["metrics"] == ["f1"]
    assert summary["judge"]["model"] == "standin" and summary["judge"]["prompts"] == "lazymem"
    records = [json.loads(x) for x in (tmp_path / "locomo" / "records.jsonl").read_text().splitlines()]
    f1 = LocomoF1({1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"})
    for r in records:
        q = Question(id=r["qid"], type=r["type"], text=r["question"], answer=r["reference"], history_id="h")
        assert r["scores"]["f1"] == pytest.approx(f1(q, r["answer"]))
    s = summary["methods"]["oracle_turn"]
    assert s["f1"] == pytest.approx(sum(r["scores"]["f1"] for r in records) / len(records))
    assert set(s["f1_by_type"]) == {r["type"] for r in records}
    results = (tmp_path / "locomo" / "results.md").read_text()
    assert "## f1" in results and "judge: standin, locomo style" in results

    fake_checkout(tmp_path / "LongMemEval")
    official = f"data.judge.official_src={tmp_path / 'LongMemEval'}"
    out = run_cli(*common, official, "data.limit=1", f"hydra.run.dir={tmp_path}/lme", env=env, standin=True)
    assert out.returncode == 0, out.stderr[-3000:]
    (summary,) = read_summary(tmp_path / "lme")["benchmarks"].values()
    judge = summary["judge"]
    assert judge["style"] == "longmemeval" and judge["max_tokens"] == 10 and judge["metrics"] == []
    assert judge["prompts"] == f"official:{(tmp_path / 'LongMemEval' / OFFICIAL_FILE).resolve()}"
    records = [json.loads(x) for x in (tmp_path / "lme" / "records.jsonl").read_text().splitlines()]
    assert records and all(r["correct"] == lme_prompts().label(r["judge_raw"]) for r in records)
    assert "f1" not in summary["methods"]["oracle_turn"]


def test_a_judge_reply_without_final_text_is_an_error_not_a_label():
    from lazymem.construct.processor import StageError
    from lazymem.llm.completion import Completion

    class ThinkingOnly(FakeClient):
        async def chat(self, messages, **kwargs):
            return Completion("<think>the response seems", finish_reason="length")

    judge = Judge(ThinkingOnly(""), lme_prompts(), max_tokens=10)
    with pytest.raises(StageError, match="no final text"):
        asyncio.run(judge(question(), "19 days"))
