"""The agent's start-up checks (lazymem/agent/entry.py): the settings, `lazymem.validate` and preflight's
checks of the roles the method calls, each failure one line naming its key; through the functions, through
`Memory.from_config` and through the real CLI of `lazymem serve` and `lazymem mcp`."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lazymem.agent.entry import check, compose, load, problems, refuse_gone_overrides
from lazymem.agent.memory import Memory
from lazymem.agent.settings import Settings, one_line
from lazymem.validate import ConfigError

from agent_helpers import ROOT

MISSING_ENCODER = "retrieval.retrievers.dense.encoder.model=/nonexistent"
ENCODER_PROBLEM = (
    "retrieval.retrievers.dense.encoder.model = '/nonexistent' is not a local model directory: "
    "pass retrieval.retrievers.dense.encoder.model=/path/to/model"
)


def test_a_good_config_gives_its_settings():
    cfg, settings = load(["method=rag", "agent.max_open_users=3"])
    assert isinstance(settings, Settings) and settings.agent.max_open_users == 3
    assert cfg.method._target_.startswith("lazymem.methods.rag.")


def test_the_old_kind_switch_is_refused_naming_the_new_one():
    message = "agent.store.kind is gone: choose the store with agent/store=postgres (or agent/store=sqlite)"
    for override in ("agent.store.kind=postgres", "+agent.store.kind=sqlite", "++agent.store.kind=x"):
        with pytest.raises(ConfigError) as e:
            refuse_gone_overrides(["serve.port=0", override])
        assert one_line(e.value) == message
        with pytest.raises(ConfigError) as e:
            compose([override])
        assert one_line(e.value) == message
    refuse_gone_overrides(["agent/store=postgres", "agent.store.kinds=1"])  # others pass


def test_a_bad_override_is_one_line():
    with pytest.raises(ConfigError) as e:
        compose(["agent.bogus=1"])
    assert "agent.bogus" in one_line(e.value) and "\n" not in one_line(e.value)


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("agent.max_open_users=-1", "agent.max_open_users: expected an integer >= 1, got -1"),
        ("method.top_k=0", "method.top_k = 0: must be an integer >= 1"),  # lazymem.validate's
        ("retrieval.retrievers.bm25.backend=nope", "retrieval.retrievers.bm25.backend = 'nope'"),
        (MISSING_ENCODER, ENCODER_PROBLEM),  # preflight's, with its fix
    ],
)
def test_every_check_fails_in_one_line_naming_the_key(override, named):
    with pytest.raises(ConfigError) as e:
        check(compose(["method=rag", override]))
    assert named in one_line(e.value) and "\n" not in one_line(e.value)


def test_several_problems_share_the_line():
    with pytest.raises(ConfigError) as e:
        check(compose(["method=rag", "method.top_k=0", "retrieval.n=0"]))
    line = one_line(e.value)
    assert len(e.value.problems) == 2 and line.count("; ") == 1
    assert "method.top_k" in line and "retrieval.n" in line


def test_only_the_roles_the_method_calls_are_checked():
    """Without a model for the LLM roles, LazyMem (it calls `memory`) cannot start, retrieval alone can."""
    unset = "llm.common.model=null"
    assert problems(compose([unset])) == [
        "llm.roles.memory.model is not set: pass llm.roles.memory.model=... (a model directory or a GGUF)"
    ]
    assert problems(compose(["method=rag", unset])) == []


def test_the_retriever_is_checked_only_for_a_method_that_builds_one():
    assert problems(compose(["method=rag", MISSING_ENCODER])) == [ENCODER_PROBLEM]
    assert problems(compose(["method=full_history", MISSING_ENCODER])) == []


def test_memory_from_config_runs_the_checks(tmp_path):
    with pytest.raises(ConfigError, match="retrieval.retrievers.dense.encoder.model = '/nonexistent'"):
        Memory.from_config(["method=rag", MISSING_ENCODER, f"agent.dir={tmp_path}"])
    with pytest.raises(ConfigError, match="agent.max_open_users"):
        Memory.from_config(["method=rag", "agent.max_open_users=0", f"agent.dir={tmp_path}"])
    assert not (tmp_path / "memory.sqlite").exists()  # refused before any store opened


def start(command: str, *overrides: str, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lazymem.run", command, "method=rag", f"agent.dir={tmp_path}", *overrides],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "LAZYMEM_API_KEYS": "key-0123456789=t"},
    )


@pytest.mark.parametrize("command", ["serve", "mcp"])
@pytest.mark.parametrize(
    ("override", "named"),
    [("agent.max_open_users=-1", "agent.max_open_users"), (MISSING_ENCODER, ENCODER_PROBLEM)],
)
def test_the_cli_refuses_to_start_in_one_line(tmp_path, command, override, named):
    done = start(command, override, tmp_path=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith(f"lazymem {command}: ") and named in done.stderr
    assert done.stdout == ""  # mcp: stdout is the protocol channel
