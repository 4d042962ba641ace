"""task=tiny_model: a tiny random Qwen3 in <run dir>/model (lazymem/train/tiny_qwen3.py), the base model of
+experiment=chain_cpu: the CPU chain makes its own base instead of downloading Qwen3-4B."""

from __future__ import annotations

from lazymem.tasks.contract import Task
from lazymem.train.tiny_qwen3 import write


def run(cfg, run) -> dict:
    opts = cfg.tiny_model
    out = run.dir / "model"
    n = write(out, int(opts.hidden), int(opts.layers), int(opts.vocab), int(opts.seed))
    print(f"tiny Qwen3: {n} parameters -> {out}")
    return {"model": str(out), "parameters": n}


TASK = Task(run)
