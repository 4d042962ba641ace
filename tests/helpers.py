"""What tests in any folder share: the checkout's paths, `run_cli` (the entry point as a user runs it), a
reader of W&B's offline transaction log, and the paper's constants several tests count against."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

from lazymem import cuda_env
from lazymem.data.schema import History, Message, Question

from standin import STANDIN_OVERRIDES, standin_env

ROOT = Path(__file__).resolve().parent.parent  # the checkout under test
TESTS = ROOT / "tests"
EXTENSION = TESTS / "extension"  # the outside-the-package examples (toy backend, benchmark, method, ...)
SCRIPTS = ROOT / "scripts"
# Every role on the bundled SmolLM2-135M (llama.cpp), for the golden-path tests where a real model server
# matters but the model's quality does not.
SMOLLM2 = ("llm.common.model=bundled:smollm2-135m", "llm.common.served_name=smollm2-135m")

TABLE_9 = {  # LongMemEval question type: (total, train, val, test), the paper's Appendix D.1
    "single-session-user": (70, 50, 6, 14),
    "single-session-assistant": (56, 40, 5, 11),
    "single-session-preference": (30, 22, 2, 6),
    "multi-session": (133, 96, 10, 27),
    "temporal-reasoning": (133, 96, 11, 26),
    "knowledge-update": (78, 56, 6, 16),
}
# The main table's methods (conf/experiment/main_table*.yaml)
MAIN_TABLE_METHODS = {
    "oracle_turn",
    "oracle_session",
    "rag_top20",
    "rag_top50",
    "nanomemory",
    "mem0",
    "lazymem_32b",
    "lazymem_4b",
    "full_history",
}


def run_cli(
    *overrides: str, env: dict | None = None, timeout: int = 300, standin: bool = False
) -> subprocess.CompletedProcess:
    """`python -m lazymem.run OVERRIDES` from the repo root, as a user would run it.

    Without tracking (`logger=none`) unless the caller passes a `logger=` override; an `env` value of None
    removes that variable. `standin=True`: every LLM role on the in-process stand-in (tests/standin.py).
    """
    if not any(o.lstrip("+~").startswith("logger=") for o in overrides):
        overrides = (*overrides, "logger=none")
    full_env = {**os.environ, **(env or {})}
    if standin:
        overrides, full_env = (*overrides, *STANDIN_OVERRIDES), standin_env(full_env)
    return subprocess.run(
        [sys.executable, "-m", "lazymem.run", *overrides],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={k: v for k, v in full_env.items() if v is not None},
    )


def read_wandb(path: Path) -> list:
    """The records of a `run-*.wandb` transaction log (32 KiB blocks of crc32/len/type-framed chunks)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, block, pos, buf, out = path.read_bytes(), 32768, 7, b"", []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, n, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if n == 0 and kind == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7 : pos + 7 + n], pos + 7 + n
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):  # full, last
            rec = pb.Record()
            rec.ParseFromString(buf)
            out.append(rec)
    return out


def make_history(sessions: list[tuple[str, str, list[str]]]) -> History:
    """History "h" of sessions (session id, date, texts); roles alternate user/assistant within a session."""
    messages = []
    for sid, date, texts in sessions:
        for k, text in enumerate(texts):
            messages.append(Message(len(messages), sid, date, ("user", "assistant")[k % 2], text))
    return History("h", messages)


def ask(text="What did I name the dog I adopted?", **kw) -> Question:
    """A question on history "h" whose answer is Biscuit."""
    return Question(id="q", type="single-session-user", text=text, answer="Biscuit", history_id="h", **kw)


def fake_cuda_tools(tmp_path: Path, monkeypatch, driver: str | None, nvcc: str | None) -> None:
    """PATH holds only a fake nvidia-smi reporting driver `driver` and a fake nvcc of CUDA release `nvcc`
    (None: absent), and torch's other places for nvcc are empty."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("nvidia-smi", "nvcc"):
        (bin_dir / tool).unlink(missing_ok=True)
    scripts = {}
    if driver is not None:
        query = "--query-gpu=driver_version --format=csv,noheader"
        scripts["nvidia-smi"] = f'[ "$*" = "{query}" ] || exit 2\necho {driver}\necho {driver}\n'
    if nvcc is not None:
        scripts["nvcc"] = f"echo 'Cuda compilation tools, release {nvcc}, V{nvcc}.88'\n"
    for tool, body in scripts.items():
        (bin_dir / tool).write_text("#!/bin/sh\n" + body)
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(cuda_env, "DEFAULT_CUDA_HOME", tmp_path / "no-cuda")
