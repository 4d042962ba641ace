"""The chain's checks before it starts (lazymem/chain/preflight.py): every running stage's task check (its
contract's `problems`), GPUs counted against the node, earlier stages' outputs left to the stage itself, one
line per message."""

from __future__ import annotations

from types import SimpleNamespace

from lazymem.chain.plan import Decision
from lazymem.chain.preflight import problems
from lazymem.chain.stages import parse


def decisions(actions, checks):
    """The stages split, build (task build_sft) and evaluate, each with its task's check in `checks` (a
    stage without one: a task without a check)."""
    stages = parse(
        {"split": {}, "build": {"gpus": 2, "overrides": ["x={split}"]}, "evaluate": {"gpus": 1}}, 2
    )
    task = {"split": "split", "build": "build_sft", "evaluate": "evaluate"}
    return [
        Decision(
            s,
            actions[s.name],
            "",
            config=SimpleNamespace(task=task[s.name]),
            task=SimpleNamespace(problems=checks.get(task[s.name])),
        )
        for s in stages
    ]


def test_every_running_stage_is_checked_and_the_same_message_listed_once(tmp_path):
    chain = tmp_path / "chain"
    checks = {
        "split": lambda cfg: ["data.path = 'x' is not a file"],
        "build_sft": lambda cfg: ["data.path = 'x' is not a file", f"{chain}/split/split.json is missing"],
        "evaluate": lambda cfg: 1 / 0,
    }
    found = problems(decisions(dict.fromkeys(["split", "build", "evaluate"], "run"), checks), chain, 0)
    assert found == [
        "split, build: data.path = 'x' is not a file",
        "build: needs 2 GPUs (its chain.stages.<stage>.gpus); this node has 0",
        "evaluate: needs 1 GPUs (its chain.stages.<stage>.gpus); this node has 0",
        "evaluate: could not be checked: ZeroDivisionError: division by zero",
    ]
    # the earlier stage's output (under the chain's directory) is the stage's own business when it starts
    assert not [m for m in found if "split.json" in m]


def test_skipped_stages_and_a_joined_cluster_are_not_checked(tmp_path):
    checks = {"split": lambda cfg: ["a problem"]}
    actions = {"split": "skip", "build": "continue", "evaluate": "given"}
    assert problems(decisions(actions, checks), tmp_path, None) == []
    assert problems(decisions(actions, checks), tmp_path, 4) == []
