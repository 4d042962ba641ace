"""chain.json: written whole after every event, read back by a resumed chain."""

import hashlib
import json
import sys

import pytest

from lazymem.chain.record import ChainRecord, dataset_hashes, environments, previous, resume_command, top
from lazymem.validate import ConfigError


def test_every_update_rewrites_a_whole_record_that_a_resume_reads_back(tmp_path):
    record = ChainRecord(tmp_path, {"command": "x"}, [{"name": "a", "status": "pending"}, {"name": "b"}])
    assert json.loads((tmp_path / "chain.json").read_text())["status"] == "running"
    record.update("a", status="running", started="t0")
    assert json.loads((tmp_path / "chain.json").read_text())["stages"][0] == {
        "name": "a",
        "status": "running",
        "started": "t0",
    }
    record.finish("ok")
    data = json.loads((tmp_path / "chain.json").read_text())
    assert data["status"] == "ok" and data["ended"] and not list(tmp_path.glob(".*tmp"))
    assert previous(tmp_path)["a"]["status"] == "running" and previous(tmp_path / "none") == {}


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
