"""LLM backends (lazymem/llm/backends.py): auto's choice, each backend's dialect, GPU need and preflight
problems, and vLLM's version and flag checks."""

from __future__ import annotations

import sys

import pytest

from lazymem.llm import backends
from lazymem.llm.backends import (
    AutoBackend,
    EndpointBackend,
    LlamaCppBackend,
    VllmBackend,
    get_backend,
    vllm_problems,
)


def test_auto_backend(monkeypatch, tmp_path):
    rc = {
        "backend": "auto",
        "model": str(tmp_path),
        "fallback_gguf": "bundled:qwen2.5-0.5b",
        "served_name": "m",
    }

    def chosen(**changes):
        b = get_backend({**rc, **changes}).resolve()
        return type(b), b.model

    monkeypatch.setattr(backends, "has_gpu", lambda: True)
    assert chosen() == (VllmBackend, str(tmp_path))
    assert chosen(model="Qwen/Qwen3-32B")[0] is LlamaCppBackend  # not a local directory
    monkeypatch.setattr(backends, "has_gpu", lambda: False)
    assert chosen() == (LlamaCppBackend, "bundled:qwen2.5-0.5b")
    with pytest.raises(ValueError, match="no GGUF"):
        chosen(fallback_gguf=None)
    assert get_backend({**rc, "fallback_gguf": None}).problems("llm.roles.x")[0].startswith("llm.roles.x: ")
    assert isinstance(get_backend(rc), AutoBackend) and not AutoBackend.needs_gpu


def test_backends_own_their_dialect_gpu_need_and_preflight_problems(tmp_path, monkeypatch):
    base = {"served_name": "m", "model": str(tmp_path / "missing")}
    vllm, llama = get_backend({**base, "backend": "vllm"}), get_backend({**base, "backend": "llamacpp"})
    assert (vllm.dialect.name, vllm.needs_gpu, llama.dialect.name, llama.needs_gpu) == (
        "vllm",
        True,
        "llamacpp",
        False,
    )
    assert "not a local model directory" in vllm.problems("llm.roles.a")[0] and llama.problems("w") == []
    no_env = {"python": "/no/venv-vllm/bin/python"}
    assert get_backend({"backend": "vllm", "served_name": "m", "vllm": no_env}).problems(
        "w", "stages.rl"
    ) == [
        "w.model is not set: pass stages.rl=... (a model directory or a GGUF)",
        "w.vllm.python = '/no/venv-vllm/bin/python' does not exist: make setup-vllm (vLLM's environment), "
        "or pass w.vllm.python=/path/to/env/bin/python (a GPU node's serving environment)",
    ]
    # the CPU build of vLLM (paper mode rehearsed on a CPU) needs no GPU; its environment must exist
    cpu = get_backend({**base, "backend": "vllm", "vllm": {"device": "cpu", "python": sys.executable}})
    assert not cpu.needs_gpu and cpu.problems("w") == [
        f"w.model = {base['model']!r} is not a local model directory: download it and pass "
        "w.model=/path/to/model (or set it in conf/local/, see conf/local/README.md)"
    ]
    cpu = get_backend({**base, "model": str(tmp_path), "backend": "vllm", "vllm": {"python": sys.executable}})
    assert cpu.problems("w") == [  # the model is there, but this environment has no vLLM
        f"w.vllm: {sys.executable} has vLLM none, not 0.32.x (make setup-vllm, or a GPU node's serving env)",
    ]
    monkeypatch.delenv("NO_SUCH_KEY_ENV", raising=False)
    ep = get_backend(
        {"backend": "endpoint", "served_name": "m", "api_key_env": "NO_SUCH_KEY_ENV", "dialect": "llamacpp"}
    )
    assert isinstance(ep, EndpointBackend) and ep.dialect.name == "llamacpp" and not ep.needs_model
    assert ep.problems("w") == [
        "w.base_url is not set",
        "w needs an API key: export NO_SUCH_KEY_ENV=... (it is read from the environment only)",
    ]
    with pytest.raises(ValueError, match="dialect = 'tgi'"):
        get_backend({"backend": "endpoint", "dialect": "tgi"})
    with pytest.raises(ValueError, match="not a subclass"):
        get_backend({"backend": "json.JSONDecoder"})


def fake_vllm_python(path, version: str, flags: str):
    path.write_text(f"#!/bin/sh\necho {version}\necho 'usage: {flags}'\n")
    path.chmod(0o755)
    return str(path)


def test_vllm_preflight_checks_the_pinned_series_and_every_flag(tmp_path):
    cmd = ["py", "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--reasoning-config", "{}"]
    python = fake_vllm_python(tmp_path / "a", "0.32.0", "--model MODEL --reasoning-parser P")
    assert vllm_problems(python, cmd) == [
        "vLLM 0.32.0 has no --reasoning-config (check the flags against its --help)"
    ]
    python = fake_vllm_python(tmp_path / "b", "0.32.1", "--model MODEL --reasoning-config C")
    assert vllm_problems(python, cmd) == []
    python = fake_vllm_python(tmp_path / "c", "0.24.0", "--model MODEL --reasoning-config C")
    assert vllm_problems(python, cmd) == [
        f"{python} has vLLM 0.24.0, not 0.32.x (make setup-vllm, or a GPU node's serving env)"
    ]


@pytest.mark.parametrize("name", ["llamacpp", "vllm"])
def test_extra_args_that_hydra_read_as_a_boolean_are_named_before_any_server(tmp_path, name):
    rc = {"backend": name, "served_name": "m", "model": str(tmp_path)}
    bad = get_backend({**rc, name: {"extra_args": ["--flash_attn", True], "python": "/no/python"}})
    problem = bad.problems("llm.roles.memory")[0]  # vLLM adds that its environment is missing
    assert problem.startswith(f"llm.roles.memory.{name}.extra_args = ['--flash_attn', True]: ")
    assert "quote" in problem
    good = get_backend({**rc, "llamacpp": {"extra_args": ["--flash_attn", "true"]}, "backend": "llamacpp"})
    assert good.problems("llm.roles.memory") == []
