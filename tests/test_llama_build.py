"""The llama.cpp runtime is built for a CPU baseline, never for the machine that built it.

scripts/setup_env.sh builds llama-cpp-python with native code generation off and AVX2/FMA/F16C on
(LLAMA_CPU=avx2, the default): a -march=native build made on an AVX-512/AMX Xeon segfaulted on its first
completion there, and a wheel built on one CPU is reused on others. The check reads the instructions, so it
passes or fails the same on any CPU, whatever the CPU running it lacks.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

# AVX-512 (zmm registers, opmask registers, EVEX-only xmm/ymm 16-31) and AMX (tile registers)
BEYOND_AVX2 = re.compile(r"%zmm\d|%tmm\d|\{%k[1-7]\}|%[xy]mm(?:1[6-9]|2\d|3[01])\b")


def llama_libraries() -> list[Path]:
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        pytest.skip("llama-cpp-python is not installed (the serve-cpu extra)")
    return sorted(Path(spec.origin).parent.glob("lib/lib*.so"))


@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) not installed")
@pytest.mark.skipif(os.environ.get("LLAMA_CPU") == "avx512", reason="LLAMA_CPU=avx512 asks for AVX-512")
def test_the_default_build_has_no_avx512_or_amx_instructions():
    libraries = llama_libraries()
    assert any(p.name.startswith("libggml") for p in libraries), libraries
    for lib in libraries:
        asm = subprocess.run(
            ["objdump", "-d", "--no-show-raw-insn", str(lib)], capture_output=True, text=True, check=True
        ).stdout
        found = BEYOND_AVX2.search(asm)
        assert found is None, f"{lib.name} holds {found.group()}: rebuild with scripts/setup_env.sh"
