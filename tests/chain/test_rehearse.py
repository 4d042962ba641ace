"""The chain's scheduling rehearsed (lazymem/chain/rehearse.py): the node it runs on (a fake one without
GPUs, the judge's GPU after the chain's), the verdict on what the probes saw, and on a real local Ray (one
for the module, as the chain's own fake node of 2 GPUs and a reserved third) the probes of a chain whose
GRPO stage starts its own Ray in another interpreter, and a broken schedule reported, not missed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest
from omegaconf import OmegaConf

from lazymem.chain import rehearse, schedule
from lazymem.chain.driver import jobs
from lazymem.chain.fingerprint import composer
from lazymem.chain.record import StageRecord
from lazymem.chain.rehearse import Node, on_node, scheduling, workers
from lazymem.chain.schedule import cluster
from lazymem.chain.stages import parse

FAKE = Node("0,1", 2, ("2",), True)  # what node() makes of CHAIN on a machine without GPUs
# build and evaluate, independent of each other, and GRPO after build: 2 GPUs each
CHAIN = {
    "stages": {
        "build": {"gpus": 2},
        "grpo": {"gpus": 2, "sees_reserved": True, "overrides": ["x={build}"]},
        "evaluate": {"gpus": 2},
    },
    "cpus_per_stage": 2,
    "overrides": [],
    "stop_timeout_s": 60,
    "ray": {"num_cpus": None, "reserved_gpus": [None]},
}


def stages(chain=CHAIN):
    return parse(chain["stages"], chain["cpus_per_stage"])


@pytest.fixture(scope="module")
def fake_node():
    before = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"  # no token files for a throwaway local cluster
    try:
        with cluster(None, 2, FAKE.gpus, FAKE.visible):
            yield FAKE
    finally:
        if before is None:
            os.environ.pop("RAY_AUTH_MODE")
        else:
            os.environ["RAY_AUTH_MODE"] = before


@pytest.fixture
def no_gpus(monkeypatch):
    monkeypatch.setattr(rehearse, "gpu_count", lambda: 0)


def test_without_gpus_the_node_is_a_fake_one_with_the_judges_gpu_after_the_chains(no_gpus, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # a CPU machine's: the fake node names its own
    assert rehearse.node(CHAIN, stages()) == FAKE  # the judge where GRPO's plan derives it: after its 2
    reserved = {**CHAIN, "ray": {"reserved_gpus": [0]}}  # placement.train.reward_judge=0
    assert rehearse.node(reserved, stages()) == Node("1,2", 2, ("0",), True)


def test_a_gpu_node_is_its_own_gpus_with_the_judges_kept_out(monkeypatch):
    monkeypatch.setattr(rehearse, "gpu_count", lambda: 4)
    monkeypatch.setattr(schedule, "gpu_count", lambda: 4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")  # SLURM gave the job GPUs 4-7
    assert rehearse.node(CHAIN, stages()) == Node("4,5,7", 3, ("6",), False)


def notes(cuda, start, end, **more):
    return {"cuda": cuda, "start": start, "end": end, **more}


@pytest.mark.parametrize(
    ("seen", "wrong"),
    [
        ({"build": notes("0,1", 0, 1), "grpo": notes("1,0,2", 1, 2), "evaluate": notes("0,1", 2, 3)}, None),
        (  # GRPO held no GPU in the chain's Ray but trained on 0,1 (N17): the evaluation ran beside it
            {"build": notes("0,1", 0, 1), "grpo": notes("0,1,2", 1, 3), "evaluate": notes("1,0", 2, 3)},
            "grpo and evaluate held GPU 0 at the same time",
        ),
        (
            {"build": notes("0,1", 0, 1), "grpo": notes("2,0,1", 1, 2), "evaluate": notes("0,1", 2, 3)},
            "grpo saw 2,0,1, not the reserved 2 last",
        ),
        (
            {"build": notes("0,2", 0, 1), "grpo": notes("0,1,2", 1, 2), "evaluate": notes("0", 2, 3)},
            "build saw the reserved GPU 2, kept for the sees_reserved stage; "
            "evaluate asked for 2 GPUs and held 1 (0)",
        ),
    ],
)
def test_the_verdict_names_what_went_wrong(seen, wrong):
    row = scheduling("rows", stages(), seen, {}, FAKE)
    assert row.ok is (wrong is None), row
    assert row.detail.startswith("3 stages on fake GPUs 0,1 (and 2, reserved: grpo sees it after its own): ")
    if wrong:
        assert row.detail.endswith(wrong)
    else:
        assert row.detail.endswith("none two at once, 1 at most together")


def test_a_grpo_stage_holding_fewer_gpus_than_its_engine_takes_fails_the_scheduling_row(tmp_path):
    # N17 came from paper_chain's GRPO stage holding no GPU while VERL took two: its probe, seeing only what
    # it holds, would look fine; its config composed as the chain composes it says otherwise
    with composer() as compose:
        chain = OmegaConf.to_container(compose(["+experiment=paper_chain"]).chain, resolve=True)
    paper = parse(chain["stages"], chain["cpus_per_stage"], chain["overrides"])
    assert rehearse.engine_gpus(paper, ("2",), tmp_path) == []
    chain["stages"]["train_grpo"]["gpus"] = 0
    found = rehearse.engine_gpus(parse(chain["stages"], 2, chain["overrides"]), ("2",), tmp_path)
    assert found == [
        "train_grpo holds 0 GPUs (its chain.stages.<stage>.gpus) but its engine takes 2 on this node "
        "(train.grpo.n_gpus_per_node = 2): make them agree"
    ]
    seen = {"build": notes("0,1", 0, 1), "grpo": notes("0,1,2", 1, 2), "evaluate": notes("0,1", 2, 3)}
    row = scheduling("rows", stages(), seen, {}, FAKE, found)
    assert row.ok is False and row.detail.endswith(found[0])


def test_a_stage_that_did_not_run_fails_the_scheduling_row():
    seen = {"build": notes("0,1", 0, 1)}
    records = {"grpo": StageRecord("grpo", "failed", error="exit status 1")}  # evaluate: no record at all
    row = scheduling("rows", stages(), seen, records, FAKE)
    assert row.ok is False and row.detail.endswith("grpo failed (exit status 1); evaluate did not run")


def test_the_workers_python_is_the_engines_by_path_not_by_the_base_interpreter(tmp_path):
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(sys.executable)  # a venv's python: a link to the base one
    python = str(venv / "python")
    roundabout = str(tmp_path / "venv" / ".." / "venv" / "bin" / "python")
    assert workers("w", stages(), {"grpo": {"worker": roundabout}}, python).ok is True
    # the chain's own Python links to the same base interpreter, and is still another environment
    other = workers("w", stages(), {"grpo": {"worker": sys.executable}}, python)
    assert other.ok is False
    assert other.detail == f"grpo: its Ray's workers ran in {sys.executable}, not in the engine's {python}"
    assert workers("w", stages(), {}, None).ok is None  # no engine Python here: information


def venv_python(tmp_path) -> str:
    """Another interpreter (as .venv-gpu-rl's is): a venv that reads this one's packages through a .pth."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "core.pth").write_text("".join(f"{p}\n" for p in sys.path if p.endswith("site-packages")))
    return str(venv / "bin" / "python")


def test_the_grpo_stage_starts_its_own_ray_in_the_engines_python_on_its_gpus(
    fake_node, tmp_path, monkeypatch
):
    monkeypatch.setattr(rehearse, "HOLD_S", 0.3)  # the stages run one after the other here: 2 GPUs each
    python = venv_python(tmp_path)
    rows = on_node(CHAIN, stages(), fake_node, python, tmp_path / "probes", "toy", 60)
    assert [r.name for r in rows] == ["chain toy: GPU scheduling", "chain toy: Ray workers' Python"]
    assert [r.ok for r in rows] == [True, True], rows
    assert rows[1].detail == f"grpo: the workers of its own Ray ran in {python}"
    grpo = json.loads((tmp_path / "probes" / "grpo.json").read_text())
    assert grpo["worker"] == python and grpo["cuda"] in ("0,1,2", "1,0,2")
    build = json.loads((tmp_path / "probes" / "build.json").read_text())
    assert build["end"] <= grpo["start"]  # after the stage its overrides reference


def test_stages_that_use_gpus_they_do_not_hold_are_caught(fake_node, tmp_path, monkeypatch):
    # N17: each stage holds no GPU of the chain's Ray, yet sees (and would train on) GPUs 0 and 1
    def unheld(*args):
        return [replace(j, gpus=0, shared_gpus=("0", "1")) for j in jobs(*args)]

    monkeypatch.setattr(rehearse, "jobs", unheld)
    monkeypatch.setattr(rehearse, "HOLD_S", 3)  # long enough that two stages started together overlap
    chain = {**CHAIN, "stages": {"build": {"gpus": 2}, "evaluate": {"gpus": 2}}}
    rows = on_node(chain, stages(chain), fake_node, None, tmp_path / "probes", "toy", 60)
    assert rows[0].ok is False and rows[0].detail.endswith("build and evaluate held GPU 0 at the same time")
    assert rows[0].fix.endswith(f"the probes' logs: {tmp_path / 'probes'}")
    assert rows[1].ok is None  # no stage starts its own Ray here


def test_the_time_limit_stops_the_probes_and_fails_the_row(fake_node, tmp_path, monkeypatch):
    monkeypatch.setattr(rehearse, "HOLD_S", 30)
    chain = {**CHAIN, "stages": {"build": {"gpus": 2}}}
    rows = on_node(chain, stages(chain), fake_node, None, tmp_path / "probes", "toy", 1)
    assert rows[0].ok is False
    assert rows[0].detail.startswith("stopped at the time limit (1 s): ")
    assert rows[0].detail.endswith("build interrupted (interrupted: the chain was stopped)")


def test_a_chain_that_does_not_parse_is_a_failed_row_not_an_exception(tmp_path):
    chain = {**CHAIN, "stages": {"a": {"overrides": ["x={b}"]}, "b": {"overrides": ["y={a}"]}}}
    rows = rehearse.rehearse(chain, None, tmp_path, "loop")
    assert rows[0].name == "chain loop: GPU scheduling" and rows[0].ok is False
    assert rows[0].detail.startswith("the rehearsal did not run: ConfigError: ")
    assert "a cycle" in rows[0].detail and rows[1].ok is None
