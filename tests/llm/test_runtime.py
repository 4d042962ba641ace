"""lazymem.llm.runtime: cpu_features reads the instruction-set flags llama.cpp builds differ in from a
/proc/cpuinfo text (exact flag names, first processor, llama.cpp's order), and llama_build_info reports
what a Python's llama_cpp prints or "unknown"."""

import os
import sys
from pathlib import Path

import pytest

from lazymem.llm import runtime

WANTED = ["avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8"]

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Example CPU @ 2.10GHz
flags\t\t: fpu vme sse sse2 ssse3 fma sse4_1 sse4_2 avx_vnni avx512bw avx2 f16c avx512_bf16 avx amx_tile
vmx flags\t: vnmi preemption_timer invvpid ept_x_only
bugs\t\t: spectre_v1

processor\t: 1
vendor_id\t: GenuineIntel
flags\t\t: fpu avx512f amx_int8 avx512_vnni
"""


def use_cpuinfo(monkeypatch, tmp_path, text: str | None):
    """cpu_features reads `text` as /proc/cpuinfo (None: the file cannot be read)."""
    fake = tmp_path / "cpuinfo"
    if text is not None:
        fake.write_text(text)
    monkeypatch.setattr(runtime, "Path", lambda p: fake if p == "/proc/cpuinfo" else Path(p))


def test_cpu_features_keeps_wanted_flags_of_the_first_processor_in_a_fixed_order(monkeypatch, tmp_path):
    use_cpuinfo(monkeypatch, tmp_path, CPUINFO)
    # avx_vnni and avx512bw are other flags, not "avx"/"avx512f"; processor 1's extra flags are not read
    assert runtime.cpu_features() == ["avx", "avx2", "fma", "f16c", "avx512_bf16", "amx_tile"]


def test_cpu_features_of_a_cpu_with_none_of_them(monkeypatch, tmp_path):
    use_cpuinfo(monkeypatch, tmp_path, "processor\t: 0\nflags\t\t: fpu sse sse2 sse4_2 avx_vnni\n")
    assert runtime.cpu_features() == []


def test_cpu_features_without_a_flags_line_or_file_is_empty(monkeypatch, tmp_path):
    arm = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32\nCPU implementer\t: 0x41\n"
    use_cpuinfo(monkeypatch, tmp_path, arm)
    assert runtime.cpu_features() == []
    use_cpuinfo(monkeypatch, tmp_path, None)  # no /proc (macOS) or unreadable
    assert runtime.cpu_features() == []


@pytest.mark.skipif(not Path("/proc/cpuinfo").is_file(), reason="no /proc/cpuinfo on this system")
def test_cpu_features_of_this_machine_are_flags_of_its_cpuinfo():
    found = runtime.cpu_features()
    flags_line = next(
        line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")
    )
    assert set(found) <= set(flags_line.split(":", 1)[1].split())
    assert found == [f for f in WANTED if f in found]


def fake_python(tmp_path, body: str) -> str:
    """An executable standing in for a Python interpreter: ignores `-c CODE`, runs `body` in sh."""
    path = tmp_path / "python"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.skipif(os.name != "posix", reason="the stand-in interpreter is a shell script")
def test_llama_build_info_is_the_line_the_library_prints(tmp_path):
    info = "AVX = 1 | AVX2 = 1 | AVX512 = 0 | FMA = 1 | F16C = 1"
    assert runtime.llama_build_info(fake_python(tmp_path, f"echo '  {info}  '")) == info


@pytest.mark.skipif(os.name != "posix", reason="the stand-in interpreter is a shell script")
def test_llama_build_info_is_unknown_when_nothing_is_printed(tmp_path):
    assert (
        runtime.llama_build_info(fake_python(tmp_path, "echo 'No module named llama_cpp' >&2; exit 1"))
        == "unknown"
    )


def test_llama_build_info_is_unknown_for_a_python_that_cannot_run(tmp_path):
    assert runtime.llama_build_info(str(tmp_path / "no-such-python")) == "unknown"


@pytest.mark.skipif(os.name != "posix", reason="the wrapper is a shell script")
def test_llama_build_info_is_unknown_where_llama_cpp_is_not_importable(tmp_path):
    # this interpreter without site-packages (-S): `import llama_cpp` fails, nothing reaches stdout
    wrapper = fake_python(tmp_path, f'exec "{sys.executable}" -I -S "$@"')
    assert runtime.llama_build_info(wrapper) == "unknown"
