"""The chain on a real local Ray (one per module): GPU stages side by side on distinct (fake) GPUs, CPU
stages one at a time on 2 CPUs, a failure that stops what has not started, a signal that stops the rest;
and the GPUs the chain's Ray gets (chain.ray.reserved_gpus kept out)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace

import pytest
import ray

from lazymem.chain.process import Job
from lazymem.chain.record import StageRecord
from lazymem.chain.schedule import cluster, infeasible, pool, run_jobs
from lazymem.interrupt import Interrupted
from lazymem.validate import ConfigError

# a stage that notes its start, waits until every stage named in argv[3:] has started (or 30 s) and then
# argv[2] seconds more, and notes its end: stages that meet ran at the same time
MEET = """
import json, os, sys, time
me, hold, others = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
start = time.time()
open(me + '.start', 'w').close()
while not all(os.path.exists(o + '.start') for o in others) and time.time() - start < 30:
    time.sleep(0.05)
time.sleep(hold)
seen = {'cuda': os.environ.get('CUDA_VISIBLE_DEVICES'), 'nice': os.nice(0)}
json.dump({**seen, 'start': start, 'end': time.time()}, open(me, 'w'))
"""


@pytest.fixture(scope="module")
def ray_cluster():
    before = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"  # no token files for a throwaway local cluster
    try:
        with cluster(None, 2, 3):
            yield ray.get_runtime_context().gcs_address
    finally:
        if before is None:
            os.environ.pop("RAY_AUTH_MODE")
        else:
            os.environ["RAY_AUTH_MODE"] = before


def job(tmp_path, name, argv=("0",), code=MEET, **kw):
    return Job(
        name=name,
        cmd=(sys.executable, "-c", code, str(tmp_path / name), *argv),
        cwd=str(tmp_path),
        run_dir=str(tmp_path / f"{name}.d"),
        log=str(tmp_path / f"{name}.log"),
        **kw,
    )


def events():
    seen = []
    return seen, lambda event: seen.append((event.name, event.status))


def test_gpu_stages_overlap_on_distinct_devices(ray_cluster, tmp_path):
    names = ["eval_base", "eval_sft", "eval_rl"]
    jobs = [job(tmp_path, n, ["0", *(str(tmp_path / o) for o in names)], gpus=1, cpus=0.5) for n in names]
    seen, on_event = events()
    results = run_jobs(jobs, on_event, 10, tmp_path / ".gate")
    assert {r.status for r in results.values()} == {"ok"}
    runs = [json.loads((tmp_path / n).read_text()) for n in names]
    assert sorted(r["cuda"] for r in runs) == ["0", "1", "2"]
    assert max(r["start"] for r in runs) < min(r["end"] for r in runs)  # all three ran at once
    # at the chain's own priority, not Ray's worker niceness (15 by default)
    assert [r["nice"] for r in runs] == [os.nice(0)] * 3
    assert {(n, "ok") for n in names} <= set(seen)


# a stage whose job starts a Ray of its own, as VERL does with ray_kwargs.ray_init.address=local
OWN_RAY = """
import json, os, sys, ray
ray.init(address="local", num_cpus=1, include_dashboard=False, object_store_memory=75 * 1024 * 1024)
where = ray.remote(lambda: sys.executable)
out = {"worker": ray.get(where.remote()), "gcs": ray.get_runtime_context().gcs_address}
ray.shutdown()
json.dump({**out, "cuda": os.environ["CUDA_VISIBLE_DEVICES"]}, open(sys.argv[1], "w"))
"""


def test_a_job_starting_its_own_ray_gets_its_python_and_gpus_not_the_chains(ray_cluster, tmp_path):
    # another interpreter (as .venv-gpu-rl's is): a venv that reads this one's packages through a .pth file
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "core.pth").write_text("".join(f"{p}\n" for p in sys.path if p.endswith("site-packages")))
    python = str(venv / "bin" / "python")
    grpo = job(tmp_path, "grpo", gpus=1, cpus=1, code=OWN_RAY, shared_gpus=("7",))
    grpo = replace(grpo, cmd=(python, *grpo.cmd[1:]))
    results = run_jobs([grpo], lambda *a: None, 10, tmp_path / ".gate")
    assert results["grpo"].status == "ok", (tmp_path / "grpo.log").read_text()[-3000:]
    seen = json.loads((tmp_path / "grpo").read_text())
    assert seen["worker"] == python  # not the chain's Python: its raylet started the workers
    assert seen["gcs"] != ray_cluster  # a cluster of its own, not the chain's
    own, judge = seen["cuda"].split(",")
    assert own in {"0", "1", "2"} and judge == "7"  # its Ray GPU, then the reserved one


def test_two_stages_needing_two_gpus_each_run_one_after_the_other(ray_cluster, tmp_path):
    # paper_chain's GRPO and an evaluation (2 GPUs each) on this node's 3 (fake) GPUs: the evaluation waits
    # for the GPUs GRPO holds instead of starting beside it and taking one of VERL's
    jobs = [job(tmp_path, n, ["1"], gpus=2, cpus=0.5) for n in ("train_grpo", "eval_sft")]
    assert {r.status for r in run_jobs(jobs, lambda *a: None, 10, tmp_path / ".gate").values()} == {"ok"}
    a, b = (json.loads((tmp_path / n).read_text()) for n in ("train_grpo", "eval_sft"))
    assert a["end"] <= b["start"] or b["end"] <= a["start"]
    assert len(a["cuda"].split(",")) == len(b["cuda"].split(",")) == 2


def test_cpu_stages_holding_both_cpus_run_one_after_the_other(ray_cluster, tmp_path):
    # 2 s each: a stage polls whether to stop every 0.5 s; had it asked a Ray actor (a ray.get, which hands
    # the task's CPUs back while it waits), the second stage would have started on the first one's CPUs
    jobs = [job(tmp_path, n, ["2"], cpus=2) for n in ("first", "second")]
    assert {r.status for r in run_jobs(jobs, lambda *a: None, 10, tmp_path / ".gate").values()} == {"ok"}
    a, b = (json.loads((tmp_path / n).read_text()) for n in ("first", "second"))
    assert a["end"] <= b["start"] or b["end"] <= a["start"]
    assert a["cuda"] == b["cuda"] == ""  # a CPU stage sees no GPU


def test_a_failed_stage_stops_what_has_not_started_and_lets_running_stages_finish(ray_cluster, tmp_path):
    slow = "import sys, time; open(sys.argv[1] + '.start', 'w'); time.sleep(2); open(sys.argv[1], 'w')"
    # `bad` fails once `slow` runs (Ray may start the two tasks' workers a second apart)
    bad = f"import os, time\nwhile not os.path.exists({str(tmp_path / 'slow.start')!r}): time.sleep(0.05)\n"
    jobs = [
        job(tmp_path, "bad", code=bad + "raise SystemExit('error: bad input')", cpus=0.5),
        job(tmp_path, "slow", code=slow, cpus=0.5),
        job(tmp_path, "needs_bad", cpus=0.5, deps=("bad",)),
        job(tmp_path, "after_slow", cpus=0.5, deps=("slow",)),
    ]
    results = run_jobs(jobs, lambda *a: None, 10, tmp_path / ".gate")
    assert results["bad"].status == "failed" and results["bad"].error == "error: bad input"
    assert results["slow"].status == "ok" and (tmp_path / "slow").exists()
    assert results["needs_bad"] == StageRecord(
        "needs_bad", "pending", error="not started: bad did not finish"
    )
    assert results["after_slow"].status == "pending" and not (tmp_path / "after_slow.log").exists()


def test_a_signal_stops_the_running_stages_and_raises_interrupted(ray_cluster, tmp_path):
    code = "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(143)); time.sleep(60)"
    jobs = [job(tmp_path, "sleeper", code=code, cpus=1), job(tmp_path, "next", cpus=1, deps=("sleeper",))]
    seen, on_event = events()
    started = threading.Event()
    threading.Thread(
        target=lambda: started.wait(30) and os.kill(os.getpid(), signal.SIGTERM), daemon=True
    ).start()

    def note(event):
        on_event(event)
        if event.status == "running":
            started.set()

    t0 = time.monotonic()
    with pytest.raises(Interrupted) as stop:
        run_jobs(jobs, note, 10, tmp_path / ".gate")
    assert stop.value.signum == signal.SIGTERM and time.monotonic() - t0 < 20
    assert ("sleeper", "interrupted") in seen and ("next", "pending") in seen
    assert signal.getsignal(signal.SIGTERM) is not None  # the handlers are put back


def test_stages_asking_for_more_than_the_cluster_has_are_named(ray_cluster, tmp_path):
    jobs = [job(tmp_path, "big", gpus=4), job(tmp_path, "fits", gpus=1, cpus=2)]
    assert infeasible(jobs) == ["chain.stages.big.gpus = 4: the Ray cluster has 3"]


@pytest.mark.parametrize(
    ("visible", "num_gpus", "reserved", "expected"),
    [
        (None, 3, [None], (None, 3, ())),  # no judge on this node: the whole node
        (None, 3, [2], ("0,1", 2, ("2",))),
        # a position among the visible GPUs, as placement's indices are (SLURM gave the job GPUs 4-6)
        ("4,5,6", 3, [2], ("4,5", 2, ("6",))),
        ("0,1", 2, [7], (None, 2, ())),  # not one of this node's visible GPUs: nothing to keep out
    ],
)
def test_the_reserved_gpus_are_kept_out_of_the_chains_ray(visible, num_gpus, reserved, expected, monkeypatch):
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    ray_cfg = {"address": None, "num_gpus": num_gpus, "reserved_gpus": reserved}
    assert pool(ray_cfg) == expected
    assert pool({**ray_cfg, "address": "auto"}) == (None, None, ())  # a joined cluster's GPUs are its own


def test_reserved_gpus_must_be_indices():
    with pytest.raises(ConfigError, match="chain.ray.reserved_gpus"):
        pool({"address": None, "num_gpus": 2, "reserved_gpus": ["judge"]})
