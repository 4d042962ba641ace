"""Parsing chain.stages: typed stages, placeholders and dependencies, the order, and what a run covers."""

from pathlib import Path

import pytest

from lazymem.chain.stages import fill, given_paths, output_paths, parse, scope
from lazymem.validate import ConfigError

CHAIN = {
    "split": {"overrides": ["task=split"]},
    "build": {"overrides": ["+experiment=build_sft", "data.split_file={split}/split.json"]},
    "train": {
        "overrides": ["+experiment=train_sft", "train.sft.data_dir={build}"],
        "gpus": 1,
        "output": "model",
    },
    "evaluate": {
        "overrides": ["task=evaluate", "stages.sft={train}", "x={here}/y", "z={chain}"],
        "reads_test": True,
    },
    "report": {"overrides": ["task=report"], "after": ["evaluate"], "cpus": 1},
}


def names(stages):
    return [s.name for s in stages]


def test_stages_keep_their_keys_and_find_their_dependencies():
    stages = {s.name: s for s in parse(CHAIN, 2, ["logger=none"])}
    assert stages["build"].deps == ("split",)
    assert stages["evaluate"].deps == ("train",) and stages["evaluate"].reads_test
    assert stages["report"].deps == ("evaluate",) and stages["report"].cpus == 1
    assert stages["train"].gpus == 1 and stages["train"].cpus == 2 and stages["train"].output == "model"
    assert stages["split"].overrides == ("task=split", "logger=none")  # chain.overrides appended


def test_only_a_stage_that_asks_sees_the_reserved_gpus():
    spec = {"grpo": {"gpus": 2, "sees_reserved": True}, "evaluate": {"gpus": 2}}
    stages = {s.name: s for s in parse(spec, 2)}
    assert stages["grpo"].sees_reserved and not stages["evaluate"].sees_reserved


def test_placeholders_become_absolute_paths(tmp_path):
    stages = parse(CHAIN, 2)
    outputs = output_paths(stages, tmp_path, {})
    assert outputs["train"] == tmp_path / "train" / "model" and outputs["build"] == tmp_path / "build"
    evaluate = next(s for s in stages if s.name == "evaluate")
    filled = fill(evaluate, outputs, tmp_path)
    assert filled == [
        "task=evaluate",
        f"stages.sft={tmp_path}/train/model",
        f"x={tmp_path}/evaluate/y",
        f"z={tmp_path}",
    ]


def test_interpolations_are_not_placeholders():
    stages = parse({"a": {"overrides": ["x=${oc.env:HOME}", "y={a: 1}"]}}, 2)
    assert stages[0].deps == () and fill(stages[0], {"a": Path("/p")}, Path("/c")) == [
        "x=${oc.env:HOME}",
        "y={a: 1}",
    ]


def test_a_stage_runs_after_the_ones_it_needs_even_when_written_before_them():
    stages = parse({"b": {"overrides": ["x={a}"]}, "c": {}, "a": {}}, 2)
    assert names(stages) == ["c", "a", "b"]


@pytest.mark.parametrize(
    ("chain", "message"),
    [
        ({"a": {"overrides": ["x={nope}"]}}, "chain.stages.a: {nope} names no stage"),
        ({"a": {"after": ["b"]}, "b": {"after": ["a"]}}, "a cycle: a -> b -> a"),
        ({"a": {"overrides": ["x={a}"]}}, "cannot reference itself"),
        ({"a": {"gpu": 1}}, "chain.stages.a.gpu: unknown key"),
        ({"a": {"gpus": -1}}, "chain.stages.a.gpus = -1"),
        ({"a": {"overrides": "task=stats"}}, "chain.stages.a.overrides"),
        ({"a": {"ray_gpus": True}}, "chain.stages.a.ray_gpus: unknown key"),
        ({"a": {"output": "/abs"}}, "chain.stages.a.output"),
        ({}, "chain.stages is empty"),
    ],
)
def test_bad_stages_are_config_errors_naming_the_key(chain, message):
    with pytest.raises(ConfigError, match=message.replace("{", r"\{").replace("(", r"\(")):
        parse(chain, 2)


def test_from_and_until_cut_the_chain_in_its_order():
    stages = parse(CHAIN, 2)
    s = scope(stages, "build", "evaluate", {})
    assert s.run == ("build", "train", "evaluate") and s.before == ("split",)
    assert s.out == {"report": "after chain.until=evaluate"}
    for key, first, last in (("chain.from", "nope", None), ("chain.until", None, "nope")):
        with pytest.raises(ConfigError, match=f"{key} = 'nope': no such stage"):
            scope(stages, first, last, {})
    with pytest.raises(ConfigError, match="comes after"):
        scope(stages, "report", "split", {})


def test_a_given_stage_is_not_run_nor_the_stages_only_it_needs(tmp_path):
    stages = parse({**CHAIN, "stats": {"overrides": ["d={split}"]}}, 2)
    given = given_paths({"train": str(tmp_path)}, stages)
    s = scope(stages, None, None, given)
    assert "train" not in s.run and "train" not in s.out
    assert s.out == {"build": "needed only by given train"}  # split is still needed by stats
    assert s.run == ("split", "evaluate", "report", "stats")
    assert output_paths(stages, tmp_path / "c", given)["train"] == tmp_path


def test_given_names_a_stage_and_an_existing_path(tmp_path):
    stages = parse(CHAIN, 2)
    with pytest.raises(ConfigError, match="chain.given.nope: no such stage"):
        given_paths({"nope": str(tmp_path)}, stages)
    with pytest.raises(ConfigError, match="chain.given.train = .*does not exist"):
        given_paths({"train": str(tmp_path / "missing")}, stages)
