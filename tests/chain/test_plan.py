"""Resume decisions: skip what is unchanged, rerun what changed and everything downstream of it,
continue what was interrupted, and say why."""

from dataclasses import replace
from types import SimpleNamespace

import pytest

from lazymem import tasks
from lazymem.chain.fingerprint import composer
from lazymem.chain.plan import command, plan, render, supersede
from lazymem.chain.record import StageRecord
from lazymem.chain.stages import given_paths, parse, scope
from lazymem.rundir import write_config
from lazymem.validate import ConfigError

BASE = ["data.loader.per_type=1", "logger=none"]


def chain(a_extra=(), common=BASE, **b):
    return parse(
        {
            "a": {"overrides": ["task=split", *a_extra]},
            "b": {"overrides": ["task=stats", "data.split_file={a}/split.json", "data.split=train"], **b},
        },
        2,
        common,
    )


def decide(stages, chain_dir, prev=None, first=None, given=None, task_of=tasks.find):
    given = given_paths(given or {}, stages)
    covered = scope(stages, first, None, given)
    with composer() as compose:
        return plan(stages, covered, given, chain_dir, prev or {}, compose, task_of, first)


def ran(decisions, chain_dir, status="ok"):
    """chain.json's stages after the decisions ran with `status`, their run dirs written."""
    prev = {}
    with composer() as compose:
        for d in decisions:
            run_dir = d.stage.run_dir(chain_dir)
            run_dir.mkdir(parents=True, exist_ok=True)
            write_config(compose(d.overrides), run_dir)
            prev[d.stage.name] = StageRecord(d.stage.name, status, ended="t1", fingerprint=d.fingerprint)
    return prev


def actions(decisions):
    return {d.stage.name: (d.action, d.reason) for d in decisions}


def test_a_new_chain_runs_everything_and_an_unchanged_one_skips_everything(tmp_path):
    first = decide(chain(), tmp_path)
    assert actions(first) == {"a": ("run", "not run before"), "b": ("run", "not run before")}
    assert first[1].fingerprint["inputs"] == {"a": first[0].fingerprint["digest"]}
    assert f"data.split_file={tmp_path}/a/split.json" in first[1].overrides
    again = decide(chain(), tmp_path, ran(first, tmp_path))
    assert actions(again) == {"a": ("skip", "unchanged since t1"), "b": ("skip", "unchanged since t1")}
    assert [d.fingerprint["digest"] for d in again] == [d.fingerprint["digest"] for d in first]


def test_each_stage_is_planned_with_its_task_whose_versions_are_its_engine(tmp_path):
    first = decide(chain(), tmp_path)
    assert [d.task for d in first] == [tasks.find("split"), tasks.find("stats")]
    assert set(first[0].fingerprint["engine"]) == {"lazymem"}  # a task without an engine of its own
    engine = SimpleNamespace(versions=lambda cfg: {"trl": "1.15.0"}, problems=None, training_files=())
    seen = []
    ours = decide(chain(), tmp_path, task_of=lambda name: seen.append(name) or engine)
    assert seen == ["split", "stats"] and all(d.task is engine for d in ours)
    assert ours[0].fingerprint["engine"] == {"trl": "1.15.0"}
    nameless = decide(chain(), tmp_path, task_of=lambda name: None)  # no such task: the stage says so
    assert nameless[0].task is None and set(nameless[0].fingerprint["engine"]) == {"lazymem"}


def test_every_stage_starts_as_one_kind_of_record(tmp_path):
    old = StageRecord("a", "ok", started="t0", ended="t1", duration_s=1.0, returncode=0, fingerprint={})
    split = tmp_path / "elsewhere"
    split.mkdir()
    decisions = decide(chain(), tmp_path, given={"a": str(split)})
    given = decisions[0].record(tmp_path, None)
    assert given == StageRecord(
        "a", "skipped", f"chain.given: {split}", "given", given=str(split), fingerprint=None
    )
    new = decisions[1].record(tmp_path, old)
    assert (new.status, new.action, new.run_dir, new.log) == (
        "pending",
        "run",
        f"{tmp_path}/b",
        f"{tmp_path}/b.log",
    )
    assert new.fingerprint == decisions[1].fingerprint and new.started is None
    skip = replace(decisions[1], action="skip").record(tmp_path, old)
    assert (skip.status, skip.started, skip.ended, skip.duration_s, skip.returncode) == (
        "skipped",
        "t0",
        "t1",
        1.0,
        None,
    )
    assert replace(decisions[1], action="out").record(tmp_path, old) is old  # its earlier result stands


def test_a_changed_stage_reruns_with_its_dependents_and_says_what_changed(tmp_path):
    prev = ran(decide(chain(), tmp_path), tmp_path)
    changed = actions(decide(chain(["data.split_seed=1"]), tmp_path, prev))
    assert changed["a"] == ("run", "changed: config (data.split_seed: 42 -> 1)")
    assert changed["b"] == ("run", "changed: input a")
    only_b = actions(decide(chain(reads_test=True, after=[]), tmp_path, prev))
    assert only_b["a"][0] == "skip" and only_b["b"][0] == "skip"  # reads_test is the chain's, not the job's


def test_an_interrupted_stage_continues_and_a_gone_run_dir_reruns(tmp_path):
    prev = ran(decide(chain(), tmp_path), tmp_path)
    prev["b"] = replace(prev["b"], status="interrupted")
    assert actions(decide(chain(), tmp_path, prev))["b"] == (
        "continue",
        "interrupted earlier, unchanged: resume=true in its run dir",
    )
    prev["b"] = replace(prev["b"], status="ok")
    (tmp_path / "b" / "config.yaml").unlink()
    (tmp_path / "b").rmdir()
    assert actions(decide(chain(), tmp_path, prev))["b"] == ("run", "unchanged, but its run dir is gone")


def test_from_reruns_its_stages_and_needs_the_earlier_ones_finished(tmp_path):
    prev = ran(decide(chain(), tmp_path), tmp_path)
    decisions = decide(chain(), tmp_path, prev, first="b")
    assert actions(decisions) == {
        "a": ("before", "before chain.from=b (status ok)"),
        "b": ("run", "chain.from=b"),
    }
    assert render(decisions).splitlines()[0].split()[:2] == ["skip", "a"]
    prev["a"] = replace(prev["a"], status="failed")
    with pytest.raises(ConfigError, match="chain.from = 'b': stage 'a', which 'b' needs, has not finished"):
        decide(chain(), tmp_path, prev, first="b")


def test_a_given_stage_is_an_input_by_path_and_mtime(tmp_path):
    split = tmp_path / "elsewhere"
    split.mkdir()
    decisions = decide(chain(), tmp_path / "c", given={"a": str(split)})
    assert actions(decisions)["a"] == ("given", f"chain.given: {split}")
    assert decisions[1].fingerprint["inputs"] == {"a": {"path": str(split), "mtime": split.stat().st_mtime}}
    assert f"data.split_file={split}/split.json" in decisions[1].overrides


def test_wandb_stages_share_the_chain_group(tmp_path):
    decisions = decide(chain(common=["data.loader.per_type=1", "logger=wandb"]), tmp_path / "chain7")
    assert all("++logger.group=chain7" in d.overrides for d in decisions)
    assert not any("logger.group" in o for d in decide(chain(), tmp_path) for o in d.overrides)


def test_the_command_line_of_a_stage(tmp_path):
    d = decide(chain(gpus=2), tmp_path)[1]
    cmd = command(d, tmp_path)
    assert cmd[1:3] == ["-m", "lazymem.run"] and cmd[-1] == f"hydra.run.dir={tmp_path}/b"
    # a GPU stage's job gets its GPUs from the task that holds them, never the chain's Ray address
    assert not any("ray_address" in x for x in cmd) and "resume=true" not in cmd
    d.action = "continue"
    assert "resume=true" in command(d, tmp_path)


def test_a_superseded_run_dir_and_log_are_moved_aside(tmp_path):
    stage = chain()[0]
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "out.txt").write_text("old")
    (tmp_path / "a.log").write_text("old log")
    target = supersede(stage, tmp_path)
    assert target.parent == tmp_path / "superseded" and target.name.startswith("a-")
    assert (target / "out.txt").read_text() == "old" and (target / "a.log").read_text() == "old log"
    assert not (tmp_path / "a").exists() and supersede(stage, tmp_path) is None
    (tmp_path / "a").mkdir()
    assert supersede(stage, tmp_path) != target  # a second one in the same second gets its own folder
