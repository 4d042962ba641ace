"""The chain's checks before it starts (lazymem/chain/preflight.py): every running stage's task check (its
contract's `problems`), GPUs counted against the node, earlier stages' outputs left to the stage itself, one
line per message; and the GRPO stage's GPUs against its engine and the judge's place in its GPU plan."""

from __future__ import annotations

from types import SimpleNamespace

from lazymem.chain.fingerprint import composer
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


def grpo_stage(gpus, *overrides):
    """paper_chain's GRPO stage (VERL, n_gpus_per_node 2, the judge served on this node) holding `gpus`."""
    (stage,) = parse({"train_grpo": {"gpus": gpus, "sees_reserved": True}}, 2)
    with composer() as compose:
        cfg = compose(["+experiment=train_grpo", "train/grpo=verl", *overrides])
    return Decision(stage, "run", "", config=cfg, task=SimpleNamespace(problems=None))


def test_the_grpo_stage_holds_the_gpus_its_engine_takes(tmp_path):
    found = problems([grpo_stage(1)], tmp_path, 3, ("2",))
    assert found == [
        "train_grpo: holds 1 GPUs (its chain.stages.<stage>.gpus) but its engine takes 2 on this node "
        "(train.grpo.n_gpus_per_node = 2): make them agree"
    ]
    # VERL joining a cluster takes none of this node's: the stage holds none either (docs/training.md)
    remote = grpo_stage(2, "train.grpo.ray_address=10.0.0.1:6379")
    assert problems([remote], tmp_path, 3, ("2",))[0].startswith("train_grpo: holds 2 GPUs (its chain.")
    assert problems([grpo_stage(0, "train.grpo.ray_address=10.0.0.1:6379")], tmp_path, 3, ("2",)) == []


def test_the_reserved_gpu_is_where_the_grpo_stages_plan_puts_the_judge(tmp_path):
    # it sees its own 2 GPUs, then the reserved one as its GPU 2: where the plan derives the judge
    assert problems([grpo_stage(2)], tmp_path, 2, ("2",)) == []
    found = problems([grpo_stage(2, "placement.train.reward_judge=3")], tmp_path, 2, ("2",))
    assert len(found) == 1 and found[0].startswith(
        "train_grpo: sees the reserved GPU 2 (chain.ray.reserved_gpus) right after its own 2, as its GPU 2, "
        "but its GPU plan puts the reward judge on its GPU 3 (placement.train.reward_judge"
    )
    # VERL given the GPU the stage sees the judge on
    found = problems([grpo_stage(2, "placement.train.grpo=[1,2]")], tmp_path, 2, ("2",))
    assert found[-1].startswith(
        "train_grpo: its GPU plan gives VERL its GPUs [1, 2] (placement.train.grpo) but it holds 2: GPU 2 is "
        "the reserved one; leave placement.train.grpo and .reward_judge unset in the stage"
    )
    # nothing reserved (the judge elsewhere, or no judge GPU passed to the chain): nothing to compare
    assert problems([grpo_stage(2, "placement.train.reward_judge=3")], tmp_path, 2, ()) == []
