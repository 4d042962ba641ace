"""+experiment=chain_cpu end to end, once, as a researcher runs it (slow): a tiny Qwen3 base, gold SFT
targets, LLaMA-Factory SFT, TRL GRPO for a few optimiser steps, the chosen checkpoint merged, each stage's
model served by vLLM's CPU build on the two synthetic test questions, and the report.

Inside the same run the chain is stopped twice and continued with resume=true: SIGTERM once GRPO has written
its first checkpoint, SIGKILL once a stage that had not run yet has started (an evaluation or the merge; Ray
may run an evaluation before GRPO). The finished stages are then skipped
(their run directories untouched: no second SFT), GRPO goes on from its checkpoint with no repeated step and
its curriculum phase kept, no stage process outlives a killed chain, and the report exists. A last rerun
skips everything, in seconds.

This run replaces the separate end-to-end runs it covers (docs/development.md lists them)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from lazymem.train.grpo.diagnostics import load_jsonl

from helpers import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.solo]
STAGES = [
    "base_model",
    "split",
    "build_sft",
    "train_sft",
    "build_rl",
    "train_grpo",
    "merge_rl",
    "eval_base",
    "eval_sft",
    "eval_rl",
    "report",
]


@pytest.fixture
def started():
    """The chains a test starts; any still running when it ends (a failed wait) is killed with its stages,
    which share the driver's fate (lazymem/chain/process.py)."""
    procs: list[subprocess.Popen] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)


def start(procs: list, chain: Path, cache: Path, *more: str) -> subprocess.Popen:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "LAZYMEM_CACHE": str(cache)}
    cmd = [
        sys.executable,
        "-m",
        "lazymem.run",
        "+experiment=chain_cpu",
        "logger=none",
        f"hydra.run.dir={chain}",
    ]
    proc = subprocess.Popen(
        [*cmd, *more], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    procs.append(proc)
    return proc


def wait_for(proc: subprocess.Popen, ready, timeout: float) -> None:
    """Until `ready()` holds; fails if the chain ends first."""
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the chain ended (status {proc.returncode}) before the kill point:\n{err[-3000:]}")
        assert time.monotonic() < deadline, "the kill point never came"
        time.sleep(0.2)


def stages(chain: Path) -> dict:
    return {s["name"]: s for s in json.loads((chain / "chain.json").read_text())["stages"]}


def processes_under(folder: Path) -> list[str]:
    """Command lines of live processes that name `folder` (stages, trainers, model servers: their run
    directories, checkpoints and the model cache are all under the test's folder)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(folder) in text:
            found.append(text)
    return found


def mtimes(folder: Path) -> dict:
    return {str(p): p.stat().st_mtime_ns for p in folder.rglob("*")}


def test_chain_cpu_killed_twice_resumes_to_table3_then_skips_everything(tmp_path, started):
    if not (ROOT / ".venv-vllm" / "bin" / "python").exists() or not (ROOT / ".venv-sft").exists():
        pytest.skip("needs .venv-vllm (make setup-vllm) and .venv-sft (make setup-sft)")
    chain, cache = tmp_path / "chain", tmp_path / "cache"
    checkpoints = chain / "train_grpo" / "checkpoints"

    # 1. SIGTERM once GRPO has written its first checkpoint
    proc = start(started, chain, cache)
    wait_for(proc, lambda: any(checkpoints.glob("checkpoint-*/trainer_state.json")), 1200)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode != 0 and "resume=true" in err, err[-3000:]
    first = stages(chain)
    assert first["train_grpo"]["status"] == "interrupted", first["train_grpo"]
    finished = {s for s in STAGES if first[s]["status"] == "ok"}
    assert set(STAGES[:5]) <= finished, {s: first[s]["status"] for s in STAGES}
    done_before = {int(r["step"]) for r in load_jsonl(checkpoints / "train_metrics.jsonl")}
    kept = max(int(p.name.split("-")[1]) for p in checkpoints.glob("checkpoint-*"))
    phase_before = json.loads((checkpoints / "curriculum_state.json").read_text())["phase"]
    untouched = {s: mtimes(chain / s) for s in finished}
    assert not processes_under(tmp_path), "a stage outlived the interrupted chain"

    # 2. continue; SIGKILL once a stage that had not run starts (an evaluation or the merge)
    proc = start(started, chain, cache, "resume=true")
    later = [s for s in STAGES if s not in finished and s != "train_grpo"]
    wait_for(proc, lambda: any((chain / s / "meta.json").exists() for s in later), 1200)
    proc.kill()
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 30
    while processes_under(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not processes_under(tmp_path), processes_under(tmp_path)
    second = stages(chain)
    finished |= {s for s in STAGES if second[s]["status"] in ("ok", "skipped")}

    # 3. continue to the end: what had finished is skipped, the rest runs (the killed stage continues)
    proc = start(started, chain, cache, "resume=true")
    out, err = proc.communicate(timeout=1800)
    assert proc.returncode == 0, err[-4000:]
    final = stages(chain)
    assert {s: final[s]["status"] for s in STAGES} == {
        s: "skipped" if s in finished else "ok" for s in STAGES
    }
    for s in untouched:  # skipped twice, untouched: one SFT, one annotation pass
        assert mtimes(chain / s) == untouched[s], s
    assert not (chain / "superseded").exists()

    # GRPO went on from its checkpoint: every step once, those after the checkpoint redone, the phase kept
    steps = [int(r["step"]) for r in load_jsonl(checkpoints / "train_metrics.jsonl")]
    assert steps == sorted(set(steps)) and len(steps) >= 2 and steps[0] == 1, steps
    assert {s for s in done_before if s <= kept} <= set(steps) and max(steps) > kept
    assert json.loads((checkpoints / "curriculum_state.json").read_text())["phase"] >= phase_before
    assert "checkpoint-" in (chain / "train_grpo" / "trl.log").read_text()
    rows = load_jsonl(checkpoints / "train_metrics.jsonl") + load_jsonl(
        checkpoints / "validation_metrics.jsonl"
    )
    assert {"score", "format_ok", "r_act", "lam", "phase"} <= set(rows[0])  # the reward's components per step
    # the SFT model hands GRPO its format: some of its sampled replies are valid decision arrays (measured:
    # 1 of 8 in 4 of the 6 steps of an uninterrupted run, a third of one validation round's)
    assert max(r["format_ok"] for r in rows) > 0
    selected = json.loads((checkpoints / "selected_checkpoint.json").read_text())
    assert selected["engine"] == "trl" and Path(selected["path"]).is_dir()

    # the RL policy moved away from the SFT model
    sft = load_file(str(chain / "train_sft" / "model" / "model.safetensors"))
    rl = load_file(str(chain / "merge_rl" / "model" / "model.safetensors"))
    assert any(not sft[k].equal(rl[k]) for k in sft)

    # each stage's model was served by vLLM; the report's Table 3 has the three stages
    for stage in ("base", "sft", "rl"):
        logs = list((chain / f"eval_{stage}" / "servers").glob(f"vllm-lazymem-4b-{stage}-*.log"))
        assert logs and "-m vllm.entrypoints.openai.api_server" in logs[0].read_text().splitlines()[0]
    table3 = next((chain / "report").glob("table3_*.csv")).read_text()
    assert all(f"\n{stage}," in table3 for stage in ("base", "sft", "rl")), table3
    assert (chain / "report" / "dashboard.html").exists()
    assert (chain / "report" / "accuracy_by_stage.png").stat().st_size > 0
    record = json.loads((chain / "chain.json").read_text())
    assert record["status"] == "ok" and record["git"]["commit"] and record["environments"]

    # 4. a rerun skips every stage, leaves every stage's directory as it was, and takes seconds
    before = {s: mtimes(chain / s) for s in STAGES}
    t0 = time.monotonic()
    proc = start(started, chain, cache, "resume=true")
    _, err = proc.communicate(timeout=300)
    took = time.monotonic() - t0
    assert proc.returncode == 0, err[-3000:]
    assert {s["status"] for s in stages(chain).values()} == {"skipped"}
    assert {s: mtimes(chain / s) for s in STAGES} == before
    assert took < 60, took
