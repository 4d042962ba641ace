"""`import lazymem` (lazymem/__init__.py) stays cheap and exports `Memory` lazily."""

from __future__ import annotations

import subprocess
import sys


def test_import_lazymem_stays_cheap_and_memory_is_exported():
    code = "import sys, lazymem; assert 'torch' not in sys.modules and 'hydra' not in sys.modules; "
    code += "from lazymem import Memory; print(Memory.__module__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "lazymem.agent.memory"
