"""task=train_sft: the LLaMA-Factory YAML it derives, LLaMA-Factory's own parser on what build_sft writes,
and a real SFT run of a tiny random Qwen3 on CPU in the SFT environment (.venv-sft, `make setup-sft`)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from lazymem.train import sft_data as sd

from helpers import ROOT, read_wandb, run_cli
from helpers_llm import MODEL_CONFIGS
from helpers_train import write_sft_dir

SFT_PY = ROOT / ".venv-sft" / "bin" / "python"


def test_dry_run_writes_the_yaml_and_a_torchrun_command(tmp_path):
    data = write_sft_dir(tmp_path / "data", "Qwen/Qwen3-4B", n_questions=2)
    run_dir = tmp_path / "run"
    r = run_cli(
        "+experiment=train_sft",
        f"train.sft.data_dir={data}",
        "train.sft.dry_run=true",
        "+train.sft.overrides.num_train_epochs=1.0",
        f"hydra.run.dir={run_dir}",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    train = yaml.safe_load((run_dir / "llamafactory.yaml").read_text())
    assert train["output_dir"] == str((run_dir / "model").resolve())
    assert train["num_train_epochs"] == 1.0 and train["deepspeed"] == str(data / "ds_z2_config.json")
    assert train["learning_rate"] == 5e-6 and train["template"] == "qwen3"  # Table 10 values kept
    assert train["report_to"] == "none" and train["run_name"] == "run-sft"  # logger=none: no W&B either
    command = (run_dir / "command.sh").read_text()
    assert "FORCE_TORCHRUN=1 NPROC_PER_NODE=2" in command and "llamafactory-cli train" in command


def test_missing_or_empty_data_stops_with_a_clear_error(tmp_path):
    r = run_cli("+experiment=train_sft", f"hydra.run.dir={tmp_path / 'a'}")
    assert r.returncode != 0 and "train.sft.data_dir is not set" in r.stderr
    data = write_sft_dir(tmp_path / "data", "m", n_questions=1)
    (data / f"{sd.DATASET_NAME}.json").write_text("[]")
    r = run_cli("+experiment=train_sft", f"train.sft.data_dir={data}", f"hydra.run.dir={tmp_path / 'b'}")
    assert r.returncode != 0 and "holds no SFT instance" in r.stderr


def sft_env() -> Path:
    if not SFT_PY.exists():
        pytest.fail("the SFT environment is missing: run `make setup-sft` (make test does)")
    return SFT_PY


def llamafactory_parse(train: dict, env: dict | None = None) -> subprocess.CompletedProcess:
    code = (
        "import json, sys; from llamafactory.hparams import get_train_args\n"
        "m, d, t, f, g = get_train_args(json.loads(sys.argv[1]))\n"
        "print(json.dumps({'model': m.model_name_or_path, 'template': d.template, 'stage': f.stage,\n"
        "  'finetuning': f.finetuning_type, 'lr': t.learning_rate, 'epochs': t.num_train_epochs,\n"
        "  'zero_stage': t.deepspeed and t.hf_deepspeed_config.config['zero_optimization']['stage'],\n"
        "  'bf16': t.bf16, 'thinking': d.enable_thinking, 'best_by': t.load_best_model_at_end and\n"
        "  t.metric_for_best_model, 'optim': str(t.optim.value), 'avg': t.average_tokens_across_devices}))\n"
    )
    return subprocess.run(
        [str(sft_env()), "-c", code, json.dumps(train)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.solo
def test_llamafactory_parser_accepts_the_generated_yaml(tmp_path):
    """The sft.yaml build_sft writes, DeepSpeed ZeRO-2 and bf16 included, parsed by LLaMA-Factory's own
    get_train_args. LLaMA-Factory accepts DeepSpeed only under torchrun and bf16 only on a GPU, so the
    parse runs as one torchrun process with use_cpu added; nothing else is changed."""
    data = write_sft_dir(tmp_path / "data", "Qwen/Qwen3-4B", n_questions=1, n_val=1)
    train = yaml.safe_load((data / "sft.yaml").read_text())
    torchrun = {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    r = llamafactory_parse({**train, "use_cpu": True}, torchrun)
    assert r.returncode == 0, r.stderr[-3000:]
    parsed = json.loads(r.stdout.strip().splitlines()[-1])
    assert parsed == {
        "model": "Qwen/Qwen3-4B",
        "template": "qwen3",
        "stage": "sft",
        "finetuning": "full",
        "lr": 5e-6,
        "epochs": 2.0,
        "zero_stage": 2,
        "bf16": True,
        "thinking": False,
        "best_by": "eval_loss",
        "optim": "adamw_torch",
        "avg": False,
    }
    bad = llamafactory_parse({**train, "use_cpu": True, "learning_rat": 1e-5}, torchrun)
    assert bad.returncode != 0 and "learning_rat" in bad.stderr


@pytest.mark.slow
@pytest.mark.solo
def test_tiny_qwen3_sft_runs_on_cpu_and_records_the_checkpoint(tmp_path):
    tiny = tmp_path / "tiny-qwen3"
    made = subprocess.run(
        [str(sft_env()), str(ROOT / "scripts/tiny_qwen3.py"), str(tiny)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    data = write_sft_dir(tmp_path / "data", str(tiny), n_val=2)
    n_records = len(json.loads((data / f"{sd.DATASET_NAME}.json").read_text()))
    assert n_records >= 4
    run_dir = tmp_path / "run"
    r = run_cli(
        "+experiment=train_sft_cpu",
        f"train.sft.data_dir={data}",
        f"hydra.run.dir={run_dir}",
        "+train.sft.overrides.model_name_or_path=" + str(tiny),
        "logger=wandb",  # offline by default; sft.yaml's report_to: wandb joins the same project
        "+train.sft.overrides.cutoff_len=1024",
        "+train.sft.overrides.logging_steps=1",
        timeout=900,
    )
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    record = json.loads((run_dir / "checkpoint.json").read_text())
    model_dir = Path(record["path"])
    assert model_dir == (run_dir / "model").resolve()
    assert "model.safetensors" in record["weights"] and (model_dir / "config.json").exists()
    # 2 epochs (Table 10) of one instance per step, with accumulation 8 -> ceil(n / 8) steps per epoch
    assert record["results"]["epoch"] == pytest.approx(2.0)
    assert record["global_step"] == 2 * -(-n_records // 8)
    assert record["logged_losses"] and all(x > 0 for x in record["logged_losses"])
    # the epoch with the lowest validation loss is the final model, and the choice is written beside it
    chosen = json.loads((model_dir / "selected_checkpoint.json").read_text())
    assert record["selected"] == chosen and len(chosen["candidates"]) == 2  # one evaluation per epoch
    assert chosen["value"] == min(chosen["candidates"].values())
    assert chosen["candidates"][str(chosen["step"])] == chosen["value"]
    lf_log = (run_dir / "llamafactory.log").read_text()
    assert "llamafactory-cli train" in lf_log.splitlines()[0] and "train_loss" in lf_log
    assert "train_loss" in r.stdout  # streamed to the console as it ran
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "ok"
    assert "FORCE_TORCHRUN" not in (run_dir / "command.sh").read_text()  # one CPU process, no DeepSpeed
    runs = {}
    for wandb_file in (run_dir / "wandb").glob("offline-run-*/run-*.wandb"):
        records = read_wandb(wandb_file)
        run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
        history = {
            i.key or "/".join(i.nested_key)
            for r in records
            if r.WhichOneof("record_type") == "history"
            for i in r.history.item
        }
        runs[run.display_name] = (run.project, history)
    assert set(runs) == {run_dir.name, f"{run_dir.name}-sft"}
    assert {project for project, _ in runs.values()} == {"lazymem"}
    assert "train/loss" in runs[f"{run_dir.name}-sft"][1]  # LLaMA-Factory's Trainer logged its loss


def test_the_chains_check_names_the_missing_environment_and_its_fix(tmp_path):
    from omegaconf import OmegaConf

    from lazymem.tasks.train_sft import problems

    assert problems(OmegaConf.create({"train": {"sft": {"venv": str(ROOT / ".venv")}}})) == [
        f"{ROOT / '.venv' / 'bin' / 'llamafactory-cli'} not found: create LLaMA-Factory's environment with "
        "`make setup-sft` (or train.sft.venv=...)"
    ]
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "llamafactory-cli").touch()
    assert problems(OmegaConf.create({"train": {"sft": {"venv": str(tmp_path)}}})) == []


@pytest.mark.skipif(torch.version.cuda is not None, reason="this environment's torch is a CUDA build")
def test_on_a_gpu_node_sft_from_an_environment_with_a_cpu_torch_is_named(tmp_path, monkeypatch):
    """N15: .venv-sft's torch is the CPU build; on a GPU node, SFT on the GPUs (no use_cpu) from it is named
    before the chain starts, with the fix. A CPU run (use_cpu) asks nothing."""
    from omegaconf import OmegaConf

    from lazymem.tasks import train_sft

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "llamafactory-cli").touch()
    python = tmp_path / "bin" / "python"  # an environment with this one's CPU torch
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    monkeypatch.setattr(train_sft, "has_gpu", lambda: True)
    sft = {"venv": str(tmp_path), "overrides": {}}
    [found] = train_sft.problems(OmegaConf.create({"train": {"sft": sft}}))
    assert found.startswith(f"{tmp_path / 'bin' / 'python'} (runs LLaMA-Factory's SFT on GPUs) has torch ")
    assert "a CPU build: LAZYMEM_TORCH=cuda bash scripts/setup_sft_env.sh" in found
    sft["overrides"] = {"use_cpu": True}
    assert train_sft.problems(OmegaConf.create({"train": {"sft": sft}})) == []


def test_too_little_disk_for_the_epochs_checkpoints_stops_before_llamafactory_starts(tmp_path, monkeypatch):
    """N22: LLaMA-Factory saves every epoch's weights and optimiser state (DeepSpeed ZeRO-2, bf16: 16 bytes a
    parameter, 60 GiB for Qwen3-4B), two epochs and the final model: 140 GiB with the margin
    (lazymem/train/checkpoint_disk.py). With 100 GiB free the run stops before llamafactory-cli starts,
    naming the estimate and the free space; with 150 it starts."""
    from collections import namedtuple
    from types import SimpleNamespace

    from hydra import compose, initialize_config_dir

    from lazymem.conf import CONF_DIR
    from lazymem.tasks import train_sft
    from lazymem.train import checkpoint_disk

    model = tmp_path / "Qwen3-4B"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(MODEL_CONFIGS["Qwen3-4B"]))
    data = write_sft_dir(tmp_path / "data", str(model), n_questions=2, n_val=1)  # the epochs' choice
    cli = tmp_path / "venv" / "bin" / "llamafactory-cli"
    cli.parent.mkdir(parents=True)
    cli.write_text(f"#!/bin/sh\ntouch {tmp_path / 'started'}\nexit 3\n")
    cli.chmod(0o755)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[
                "+experiment=train_sft",
                f"train.sft.data_dir={data}",
                f"train.sft.venv={cli.parent.parent}",
                "train.sft.nproc_per_node=1",
                "logger=none",
            ],
        )
    run = SimpleNamespace(dir=tmp_path / "run")
    run.dir.mkdir()
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(checkpoint_disk.shutil, "disk_usage", lambda p: usage(0, 0, 100 * 2**30))
    with pytest.raises(SystemExit) as stop:
        train_sft.run(cfg, run)
    assert stop.value.code.startswith(f"error: only 100.0 GiB free for checkpoints in {run.dir / 'model'}")
    assert "about 140 GiB more (2 checkpoints x 59.9 GiB (Qwen3-4B's 4.02B parameters x 16 bytes)" in (
        stop.value.code
    )
    assert "train.sft.min_free_gib asks for 5 GiB" in stop.value.code
    assert not (tmp_path / "started").exists()
    monkeypatch.setattr(checkpoint_disk.shutil, "disk_usage", lambda p: usage(0, 0, 150 * 2**30))
    with pytest.raises(RuntimeError, match="llamafactory-cli exited with status 3"):
        train_sft.run(cfg, run)
    assert (tmp_path / "started").exists()
