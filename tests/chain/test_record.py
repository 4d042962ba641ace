"""chain.json: written whole after every event, read back by a resumed chain."""

import hashlib
import json
import sys
from dataclasses import asdict, replace

import pytest

from lazymem.chain.record import (
    ChainRecord,
    StageRecord,
    dataset_hashes,
    environments,
    previous,
    resume_command,
    top,
)
from lazymem.validate import ConfigError


def test_every_update_rewrites_a_whole_record_that_a_resume_reads_back(tmp_path):
    planned = StageRecord("a", reason="not run before", action="run", run_dir="/c/a", log="/c/a.log")
    record = ChainRecord(tmp_path, {"command": "x"}, [planned, StageRecord("b")])
    assert json.loads((tmp_path / "chain.json").read_text())["status"] == "running"
    record.update(StageRecord("a", "running", started="t0"))
    stage = json.loads((tmp_path / "chain.json").read_text())["stages"][0]
    assert stage == {**asdict(planned), "status": "running", "started": "t0"}  # every stage, every key
    # an event sets what it knows and keeps the rest (here: when the stage started)
    record.update(StageRecord("a", "interrupted"))
    assert record.stages["a"] == replace(planned, status="interrupted", started="t0")
    record.finish("ok")
    data = json.loads((tmp_path / "chain.json").read_text())
    assert data["status"] == "ok" and data["ended"] and not list(tmp_path.glob(".*tmp"))
    assert previous(tmp_path)["a"] == record.stages["a"] and previous(tmp_path / "none") == {}


def test_an_older_record_reads_back_without_the_keys_it_lacks_or_the_ones_it_has_no_more():
    entry = {"name": "a", "status": "ok", "ended": "t1", "fingerprint": {"digest": "d"}, "retired": 1}
    assert StageRecord.read(entry) == StageRecord("a", "ok", ended="t1", fingerprint={"digest": "d"})


def test_a_failure_names_each_failed_stage_its_error_and_log_and_how_to_continue(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["run.py", "+experiment=chain_cpu"])
    bad = StageRecord("bad", "failed", log=f"{tmp_path}/bad.log", error="error: no data")
    record = ChainRecord(tmp_path, {}, [bad, StageRecord("ok", "ok")])
    assert record.failure(["bad"]) == (
        f"error: chain stage 'bad' failed: error: no data (log: {tmp_path}/bad.log)\n"
        f"fix it, then continue the chain with: python -m lazymem.run +experiment=chain_cpu resume=true "
        f"hydra.run.dir={tmp_path}"
    )


def test_an_unreadable_record_is_a_clear_error(tmp_path):
    (tmp_path / "chain.json").write_text("{broken")
    with pytest.raises(ConfigError, match="chain.json is unreadable"):
        previous(tmp_path)


def test_top_records_the_datasets_sha256_and_the_environments(tmp_path, monkeypatch):
    data = tmp_path / "data.json"
    data.write_bytes(b"[1, 2]")
    info = top("cfg", [str(data)], tmp_path)
    assert info["datasets"] == {str(data): hashlib.sha256(b"[1, 2]").hexdigest()}
    assert info["config_sha256"] == "cfg" and "commit" in info["git"]
    with pytest.raises(ConfigError, match="chain.datasets: .* is not a file"):
        dataset_hashes([str(tmp_path / "missing.json")])
    # an unset path (LongMemEval's hub copy: data.path=null, which a string interpolation renders None)
    assert dataset_hashes([None, "None", str(data)]) == {str(data): hashlib.sha256(b"[1, 2]").hexdigest()}
    monkeypatch.chdir(tmp_path)  # no .venv-sft nor .venv-vllm here
    envs = environments()
    assert envs[".venv-sft"] == {"llamafactory": "absent"} and envs[".venv-vllm"] == {"vllm": "absent"}
    assert {"python", "torch", "transformers", "trl", "verl"} <= set(envs["python"])


def test_the_resume_command_continues_the_same_chain(tmp_path, monkeypatch):
    argv = ["run.py", "+experiment=chain_cpu", "resume=false", "hydra.run.dir=/old", "chain.until=x"]
    monkeypatch.setattr(sys, "argv", argv)
    assert resume_command(tmp_path) == (
        f"python -m lazymem.run +experiment=chain_cpu chain.until=x resume=true hydra.run.dir={tmp_path}"
    )
