"""From the plan to Ray's jobs (lazymem/chain/driver.py): each running stage's job, with the test-id guard
after this chain's split on the files its task declares, and the judge's GPUs for the stage that may see
them. The whole chain through the CLI: tests/tasks/test_chain.py."""

from types import SimpleNamespace

from lazymem.chain import driver
from lazymem.chain.plan import Decision
from lazymem.chain.stages import parse


def test_training_stages_get_the_test_id_guard_and_only_the_grpo_stage_sees_the_judges_gpu(tmp_path):
    stages = parse(
        {
            "split": {},
            "build": {"overrides": ["x={split}"]},
            "grpo": {"gpus": 2, "sees_reserved": True, "overrides": ["y={build}"]},
            "evaluate": {"gpus": 2, "reads_test": True},
            "base_model": {},
        },
        2,
    )
    chain = {"stop_timeout_s": 5}
    builds = SimpleNamespace(training_files=("*.parquet",))  # a task that writes training data
    decisions = [Decision(s, "run", "", task=builds if s.name == "build" else None) for s in stages]
    jobs = {j.name: j for j in driver.jobs(decisions, tmp_path, chain, {}, ("3",))}
    assert jobs["build"].split == jobs["grpo"].split == str(tmp_path / "split")
    # each stage's guard reads the files its own task declares
    assert jobs["build"].training_files == ("*.parquet",) and jobs["grpo"].training_files == ()
    # the split itself, an evaluation, and a stage that does not come after the split are not checked
    assert jobs["split"].split is None and jobs["evaluate"].split is None and jobs["base_model"].split is None
    assert jobs["grpo"].shared_gpus == ("3",) and jobs["evaluate"].shared_gpus == ()
    assert jobs["grpo"].gpus == 2 and not any("ray_address" in x for x in jobs["grpo"].cmd)
    decisions[0].action = "out"  # no split of this chain's: nothing to check against
    assert all(j.split is None for j in driver.jobs(decisions[1:] + decisions[:1], tmp_path, chain, {}))
