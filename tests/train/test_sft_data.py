"""SFT data: stratified sampling, discard reasons, window balancing, the LLaMA-Factory files."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest
import yaml

from lazymem.conf import CONF_DIR
from lazymem.construct.windows import Window
from lazymem.data.schema import Message, Question
from lazymem.llm.client import Completion
from lazymem.train import sft_data as sd
from lazymem.train.sft_config import sft_yaml

from helpers import run_cli
from standin import StandinServer


def question(i: int, qtype: str) -> Question:
    return Question(f"q{i}", qtype, "what?", "a", "h")


def test_stratified_sample_is_proportional_and_seeded():
    qs = [question(i, "a") for i in range(50)] + [question(50 + i, "b") for i in range(30)]
    qs += [question(80 + i, "c") for i in range(20)]
    picked = sd.stratified_sample(qs, 10, seed=1)
    assert Counter(q.type for q in picked) == {"a": 5, "b": 3, "c": 2}
    assert picked == sd.stratified_sample(qs, 10, seed=1)
    assert picked != sd.stratified_sample(qs, 10, seed=2)
    # largest remainder: 7 of (3, 3, 3) seats give 3/3/3 -> quotas 2.33 each, one extra seat by name
    even = [question(i, t) for t in "xyz" for i in range(3 * "xyz".index(t), 3 * "xyz".index(t) + 3)]
    assert sorted(Counter(q.type for q in sd.stratified_sample(even, 7, 0)).values()) == [2, 2, 3]
    assert len(sd.stratified_sample(qs, 500, 0)) == 100


def item(gold: tuple[bool, ...], key: str = "w") -> sd.WindowItem:
    n = len(gold)
    msgs = tuple(Message(i, "s", "t", "user", f"m{i}") for i in range(n))
    chat = [{"role": "system", "content": "sys"}, {"role": "user", "content": f"{key} {n}"}]
    return sd.WindowItem(question(0, "a"), Window(tuple(range(n)), (), 0), chat, gold, msgs)


def reply(*ops: str) -> str:
    return json.dumps(
        [{"op": o, "compressed_content": "c" if o == "KEEP" else "", "reason": "r"} for o in ops]
    )


class ScriptedTeacher:
    """Answers by the user message (so concurrent calls stay deterministic)."""

    def __init__(self, script: dict[str, Completion]):
        self.script, self.calls = script, []

    async def chat(self, messages, prompt_version="", response_format=None, **kw):
        self.calls.append(response_format)
        return self.script[messages[-1]["content"].split()[0]]


def test_annotate_counts_each_discard_reason():
    items = [
        item((True, False), "ok"),
        item((False, False), "think"),
        item((True, False), "dropgold"),
        item((False,), "notjson"),
        item((False,), "trunc"),
        item((False, False), "count"),
        item((False,), "schema"),
        item((False,), "err"),
    ]
    teacher = ScriptedTeacher(
        {
            "ok": Completion(reply("KEEP", "DROP"), reasoning="gold is first"),
            "think": Completion("<think>nothing here</think>\n" + reply("DROP", "DROP")),
            "dropgold": Completion(reply("DROP", "DROP")),
            "notjson": Completion("sure! here"),
            "trunc": Completion('[{"op": "KEEP"'),
            "count": Completion(reply("DROP")),
            "schema": Completion('[{"op": "MAYBE", "compressed_content": "", "reason": ""}]'),
            "err": Completion("", error="timeout"),
        }
    )
    kept, reasons, codes = asyncio.run(sd.annotate(teacher, items, "v1", with_reasoning=True))
    assert reasons == {"call_error": 1, "unparsable": 2, "schema": 1, "wrong_count": 1, "dropped_gold": 1}
    assert codes == {"not_json": 1, "truncated": 1, "bad_op": 1, "wrong_count": 1}
    assert [a.reasoning for a in kept] == ["gold is first", "nothing here"]
    assert teacher.calls[0]["json_schema"]["schema"]["minItems"] == 2
    target = sd.target_text(kept[0])
    assert target.startswith("<think>\ngold is first\n</think>\n\n")
    assert json.loads(target.split("</think>")[1])[0]["op"] == "KEEP"
    kept, *_ = asyncio.run(sd.annotate(teacher, items[:2], "v1", with_reasoning=False))
    assert [sd.target_text(a)[0] for a in kept] == ["[", "["]


def annotation(keep: bool, k: int) -> sd.Annotation:
    from lazymem.construct.decisions import Decision

    op = "KEEP" if keep else "DROP"
    return sd.Annotation(item((keep,), f"x{k}"), [Decision(op, "c" if keep else "", "")], "")


def test_balance_pairs_keep_windows_with_sampled_all_drop():
    anns = [annotation(True, k) for k in range(3)] + [annotation(False, k) for k in range(10)]
    out, info = sd.balance(anns, seed=3)
    assert len(out) == 6 and sum(a.has_keep for a in out) == 3
    assert info == {"with_keep": 3, "all_drop": 10, "all_drop_sampled": 3, "short_of_drop": False}
    assert out == sd.balance(anns, seed=3)[0]
    short, info = sd.balance(anns[:3] + anns[3:4], seed=0)
    assert len(short) == 4 and info["short_of_drop"]


def test_sharegpt_record_and_stats():
    anns = [annotation(True, 0), annotation(False, 1)]
    rec = sd.sharegpt_record(anns[0])
    assert [m["role"] for m in rec["messages"]] == ["system", "user", "assistant"]
    st = sd.stats([a.item for a in anns], anns, anns, {"call_error": 0}, {}, {}, lambda t: len(t))
    assert st["keep_share"] == 0.5 and st["balanced"] == 2 and st["windows"] == 2
    assert st["mean_input_tokens"] == (3 + 4) and st["mean_target_tokens"] > 0


def test_sft_yaml_follows_table_10():
    opts = yaml.safe_load((CONF_DIR / "train" / "sft.yaml").read_text())
    opts.update(model="m", output_dir="o")
    y = sft_yaml(opts, "d", "ds.json", with_reasoning=False)
    assert y["template"] == "qwen3" and y["enable_thinking"] is False
    assert (y["learning_rate"], y["lr_scheduler_type"], y["warmup_ratio"]) == (5e-6, "cosine", 0.03)
    assert (y["per_device_train_batch_size"], y["gradient_accumulation_steps"]) == (1, 8)
    assert (y["num_train_epochs"], y["cutoff_len"], y["finetuning_type"]) == (2, 8192, "full")
    assert y["bf16"] and y["deepspeed"] == "ds.json" and y["report_to"] == "wandb"
    assert sft_yaml(opts, "d", "ds.json", with_reasoning=True)["enable_thinking"] is True
    # LLaMA-Factory 0.9.3's transformers (<= 4.52.4) defaults, which 0.9.5's transformers 5.x changed
    assert (y["optim"], y["average_tokens_across_devices"]) == ("adamw_torch", False)
    assert "eval_dataset" not in y and "load_best_model_at_end" not in y  # no validation set, no choice


def test_sft_yaml_chooses_the_epoch_by_validation_loss():
    opts = yaml.safe_load((CONF_DIR / "train" / "sft.yaml").read_text())
    opts.update(model="m", output_dir="o")
    y = sft_yaml(opts, "d", "ds.json", with_reasoning=True, eval_dataset=sd.VAL_DATASET_NAME)
    assert y["eval_dataset"] == "lazymem_sft_val" and y["eval_strategy"] == y["save_strategy"] == "epoch"
    assert (y["load_best_model_at_end"], y["metric_for_best_model"], y["greater_is_better"]) == (
        True,
        "eval_loss",
        False,
    )
    info = sd.dataset_info(sd.DATASET_NAME, sd.VAL_DATASET_NAME)
    assert info["lazymem_sft_val"]["file_name"] == "lazymem_sft_val.json"
    assert info["lazymem_sft"] == sd.DATASET_INFO["lazymem_sft"]


@pytest.mark.slow
def test_build_sft_end_to_end(tmp_path):
    proc = run_cli(
        "+experiment=build_sft_cpu",
        "train.sft.n_questions=2",
        "retrieval.n=3",
        "w=1",
        f"hydra.run.dir={tmp_path}",
        timeout=600,
        standin=True,  # the teacher on the LLM stand-in: the data pipeline, not a model
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    st = json.loads((tmp_path / "sft_stats.json").read_text())
    assert st["questions"] == 2 and st["windows"] > 0
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
