"""The CPU runtime as lazymem sees it: this CPU's instruction sets, and what the installed llama.cpp library
was compiled with. A llama.cpp build for instructions the CPU lacks loads its model, then crashes on the
first token: llamacpp_server.py and task=doctor put these two side by side."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def cpu_features() -> list[str]:
    """The instruction-set flags of this CPU that llama.cpp builds differ in (Linux /proc/cpuinfo)."""
    wanted = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8")
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    flags = next(
        (line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []
    )
    return [f for f in wanted if f in flags]


def llama_build_info(python: str = sys.executable) -> str:
    """What the installed llama.cpp library was compiled with (its own system-info line)."""
    code = "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"
