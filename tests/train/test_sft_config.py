"""LLaMA-Factory's settings (lazymem/train/sft_config.py): sft.yaml per Table 10 and with a validation set,
the train YAML with overrides, torchrun, and the record of a finished checkpoint."""

from __future__ import annotations

import json

import yaml

from lazymem.conf import CONF_DIR
from lazymem.train import sft_data as sd
from lazymem.train.sft_config import checkpoint_record, needs_torchrun, sft_yaml, train_yaml


def test_train_yaml_applies_overrides_and_owns_the_output_dir(tmp_path):
    base = {"model_name_or_path": "m", "deepspeed": "/ds.json", "bf16": True, "output_dir": "/old"}
    out = train_yaml(base, {"deepspeed": None, "bf16": False, "num_train_epochs": 1.0}, tmp_path / "model")
    assert out == {
        "model_name_or_path": "m",
        "bf16": False,
        "output_dir": str(tmp_path / "model"),
        "num_train_epochs": 1.0,
    }
    assert base["deepspeed"] == "/ds.json"  # the input is not modified
    assert train_yaml(base, {"output_dir": "/mine"}, tmp_path)["output_dir"] == "/mine"


def test_torchrun_for_several_gpus_or_deepspeed():
    assert needs_torchrun({"deepspeed": "/ds.json"}, 1)
    assert needs_torchrun({}, 2)
    assert not needs_torchrun({}, 1)
    assert not needs_torchrun({"deepspeed": None}, 1)


def test_checkpoint_record_reads_the_trainer_outputs(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"x")
    (tmp_path / "all_results.json").write_text(json.dumps({"train_loss": 1.5, "epoch": 2.0}))
    history = [{"loss": 2.0, "step": 1}, {"train_runtime": 1.0}, {"loss": 1.0, "step": 2}]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": 2, "log_history": history}))
    rec = checkpoint_record(tmp_path)
    assert rec["weights"] == ["model.safetensors"]
    assert rec["results"]["train_loss"] == 1.5
    assert rec["global_step"] == 2 and rec["logged_losses"] == [2.0, 1.0]
    assert checkpoint_record(tmp_path / "missing")["weights"] == []


def test_sft_yaml_follows_table_10():
    opts = yaml.safe_load((CONF_DIR / "train" / "sft.yaml").read_text())
    opts.update(model="m", output_dir="o")
    y = sft_yaml(opts, "d", "ds.json", with_reasoning=False)
    assert y["template"] == "qwen3" and y["enable_thinking"] is False
    assert (y["learning_rate"], y["lr_scheduler_type"], y["warmup_ratio"]) == (5e-6, "cosine", 0.03)
    assert (y["per_device_train_batch_size"], y["gradient_accumulation_steps"]) == (1, 8)
    assert (y["num_train_epochs"], y["cutoff_len"], y["finetuning_type"]) == (2, 8192, "full")
    assert y["bf16"] and y["deepspeed"] == "ds.json" and y["report_to"] == "wandb"
    assert sft_yaml(opts, "d", "ds.json", with_reasoning=True)["enable_thinking"] is True
    assert sft_yaml({**opts, "template": "smollm2"}, "d", "ds.json", False)["template"] == "smollm2"
    # LLaMA-Factory 0.9.3's transformers (<= 4.52.4) defaults, which 0.9.5's transformers 5.x changed
    assert (y["optim"], y["average_tokens_across_devices"]) == ("adamw_torch", False)
    assert "eval_dataset" not in y and "load_best_model_at_end" not in y  # no validation set, no choice
    assert y["save_strategy"] == "no"  # so no checkpoint per epoch: the final weights are the model


def test_sft_yaml_chooses_the_epoch_by_validation_loss():
    opts = yaml.safe_load((CONF_DIR / "train" / "sft.yaml").read_text())
    opts.update(model="m", output_dir="o")
    y = sft_yaml(opts, "d", "ds.json", with_reasoning=True, eval_dataset=sd.VAL_DATASET_NAME)
    assert y["eval_dataset"] == "lazymem_sft_val" and y["eval_strategy"] == y["save_strategy"] == "epoch"
    assert (y["load_best_model_at_end"], y["metric_for_best_model"], y["greater_is_better"]) == (
        True,
        "eval_loss",
        False,
    )
    info = sd.dataset_info(sd.DATASET_NAME, sd.VAL_DATASET_NAME)
    assert info["lazymem_sft_val"]["file_name"] == "lazymem_sft_val.json"
    assert info["lazymem_sft"] == sd.DATASET_INFO["lazymem_sft"]
