"""SFT data: stratified sampling, discard reasons, window balancing, the LLaMA-Factory files, and the target
lengths against GRPO's response cap (reported by build_sft, checked by train_grpo)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from pathlib import Path

import pytest
import yaml

from lazymem.construct.windows import Window
from lazymem.data.schema import Message, Question
from lazymem.llm.client import Completion
from lazymem.train import sft_data as sd
from lazymem.train.sft_config import train_yaml

from helpers import run_cli
from helpers_train import write_sft_dir


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
    st = sd.stats([a.item for a in anns], anns, anns, {"call_error": 0}, {}, {}, lambda t: len(t), 60)
    assert st["keep_share"] == 0.5 and st["balanced"] == 2 and st["windows"] == 2
    assert st["mean_input_tokens"] == (3 + 4) and st["mean_target_tokens"] > 0
    targets = sorted(len(sd.target_text(a)) for a in anns)  # the KEEP target is the longer one
    assert st["target_tokens"] == {
        **dict.fromkeys(("p50",), targets[0]),
        **dict.fromkeys(("p90", "p95", "p99", "max"), targets[1]),
        "cap": 60,
        "over_cap": sum(t > 60 for t in targets),
        "over_cap_share": sum(t > 60 for t in targets) / 2,
    }


def test_target_lengths_give_percentiles_and_the_share_over_the_cap():
    """Unit: nearest-rank percentiles of the target lengths, and how many pass GRPO's response cap."""
    out = sd.target_lengths(list(range(100, 0, -1)), cap=95)
    assert (out["p50"], out["p90"], out["p95"], out["p99"], out["max"]) == (50, 90, 95, 99, 100)
    assert (out["cap"], out["over_cap"], out["over_cap_share"]) == (95, 5, 0.05)
    assert sd.target_lengths([], cap=10) == {
        "p50": None, "p90": None, "p95": None, "p99": None, "max": None,
        "cap": 10, "over_cap": 0, "over_cap_share": 0.0,
    }  # fmt: skip


def test_a_p95_over_the_cap_is_a_warning():
    """Unit: build_sft logs this message when its targets' p95 passes GRPO's response cap."""
    assert sd.long_targets(sd.target_lengths(range(1, 101), cap=95)) is None  # p95 = 95: at the cap
    why = sd.long_targets(sd.target_lengths(range(1, 101), cap=94))
    assert why.startswith("SFT targets: p95 95 tokens, above GRPO's response cap of 94 (6.0% of the targets")
    assert "train.grpo.max_response_length" in why


def sft_run(tmp_path, targets: list[str]) -> Path:
    """A train_sft run's model directory, trained on a build_sft folder whose targets are `targets`:
    <run>/llamafactory.yaml names the dataset, as train_sft writes it."""
    data = tmp_path / "build_sft"
    data.mkdir()
    chat = [{"role": "user", "content": "u"}]
    records = [{"messages": [*chat, {"role": "assistant", "content": t}]} for t in targets]
    (data / f"{sd.DATASET_NAME}.json").write_text(json.dumps(records))
    (data / "dataset_info.json").write_text(json.dumps(sd.dataset_info(sd.DATASET_NAME)))
    run = tmp_path / "train_sft"
    (run / "model").mkdir(parents=True)
    train = {"dataset": sd.DATASET_NAME, "dataset_dir": str(data), "output_dir": str(run / "model")}
    (run / "llamafactory.yaml").write_text(yaml.safe_dump(train))
    return run / "model"


def test_grpo_refuses_sft_targets_over_the_response_cap(tmp_path, caplog):
    """Unit: the check train_grpo makes before VERL, with Qwen's tokenizer: more than max_share of the
    SFT model's targets above the cap stops it, with the share, the cap and the fix."""
    model = sft_run(tmp_path, ["short"] * 98 + ["word " * 40] * 2)  # 2% of the targets: 41 tokens
    with pytest.raises(sd.ResponseCapError) as e:
        sd.check_response_cap(model, cap=30, max_share=0.01)
    msg = str(e.value)
    assert msg.startswith(f"2.0% of the SFT targets in {tmp_path / 'build_sft' / 'lazymem_sft.json'} are")
    assert "response cap of 30 tokens (train.grpo.max_response_length" in msg
    assert "max_sft_over_cap = 1.0%" in msg and "Fix: raise train.grpo.max_response_length" in msg
    assert sd.check_response_cap(model, cap=30, max_share=0.02)["over_cap"] == 2  # at the share: runs
    assert sd.check_response_cap(model / "checkpoint-7", cap=41, max_share=0.0)["max"] == 41  # an epoch's
    with caplog.at_level(logging.WARNING, logger="lazymem.train.sft_data"):
        assert sd.check_response_cap(tmp_path / "elsewhere" / "model", cap=1, max_share=0.0) is None
    assert "SFT target lengths not checked" in caplog.text


def test_train_grpo_refuses_sft_targets_longer_than_its_response_cap(tmp_path):
    """Command kind: task=train_grpo through the CLI up to VERL's launch, as on a GPU node (the dry run stops
    at the same place), on what build_sft and train_sft write."""
    data = write_sft_dir(tmp_path / "build_sft", model="base")
    run = tmp_path / "train_sft"  # train_sft's llamafactory.yaml beside its model
    run.mkdir()
    base = yaml.safe_load((data / "sft.yaml").read_text())
    (run / "llamafactory.yaml").write_text(yaml.safe_dump(train_yaml(base, {}, run / "model")))
    common = (
        "+experiment=train_grpo",
        f"train.grpo.rl_data_dir={tmp_path}",
        f"train.grpo.model={run / 'model'}",
        "train.grpo.dry_run=true",
    )
    proc = run_cli(*common, "train.grpo.max_response_length=8", f"hydra.run.dir={tmp_path / 'short'}")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert f"error: 100.0% of the SFT targets in {data / 'lazymem_sft.json'} are longer" in proc.stderr
    assert "response cap of 8 tokens" in proc.stderr and "max_sft_over_cap = 1.0%" in proc.stderr
    assert not (tmp_path / "short" / "command.sh").exists()
    proc = run_cli(*common, f"hydra.run.dir={tmp_path / 'fits'}")  # Table 10's 3,072
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "fits" / "command.sh").exists()


def test_grpo_learns_the_thinking_switch_the_sft_model_was_trained_with(tmp_path):
    model = sft_run(tmp_path, ["short"])
    assert sd.sft_thinking(model) is None  # the run's yaml does not say
    config = model.parent / "llamafactory.yaml"
    for switch in (False, True):
        config.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "enable_thinking": switch}))
        assert sd.sft_thinking(model) is switch and sd.sft_thinking(model / "checkpoint-3") is switch
    assert sd.sft_thinking(tmp_path / "elsewhere" / "model") is None
