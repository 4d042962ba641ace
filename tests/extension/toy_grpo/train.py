"""The toy engine's trainer, `python -m toy_grpo.train TOY_CONFIG.json`: each step writes a checkpoint and
validates it into the validation log every engine writes; the reward peaks at step `best`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from lazymem.train.grpo.checkpoints import append_validation
from toy_grpo.engine import ToyEngine


def main(path: str) -> None:
    config = json.loads(Path(path).read_text(encoding="utf-8"))
    directory = Path(config["checkpoint_dir"])
    for step in range(1, config["steps"] + 1):
        checkpoint = directory / ToyEngine.layout.format(step)
        checkpoint.mkdir(parents=True, exist_ok=True)
        (checkpoint / "weights.txt").write_text(f"step {step}\n", encoding="utf-8")
        reward = 1.0 - abs(step - config["best"]) / config["steps"]
        append_validation(directory, {"step": step, "lam": 0.0, "phase": 1, "reward": reward})
        print(f"toy step {step}: validation reward {reward:.2f}")


if __name__ == "__main__":
    main(sys.argv[1])
