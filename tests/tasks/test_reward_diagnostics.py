"""task=reward_diagnostics (Table 11) over a tiny rollout file, no model."""

from __future__ import annotations

import json

from helpers import run_cli


def test_reward_diagnostics_task(tmp_path):
    """The Table 11 task over a tiny rollout file (lives here: RL-stage tooling, no model)."""

    def line(pid, gold, ops):
        items = [{"op": o, "compressed_content": "c" if o == "KEEP" else "", "reason": ""} for o in ops]
        return json.dumps({"prompt_id": pid, "gold": gold, "response": json.dumps(items)})

    g = [True, True, False, False, False, False]
    src = tmp_path / "rollouts.jsonl"
    src.write_text(
        "\n".join(
            [
                line("A", g, ["KEEP", "KEEP", "DROP", "DROP", "KEEP", "KEEP"]),
                line("A", g, ["KEEP", "DROP", "DROP", "DROP", "DROP", "DROP"]),
            ]
        )
        + "\n"
    )
    proc = run_cli(
        "+experiment=reward_diagnostics", f"diagnostics.rollouts={src}", f"hydra.run.dir={tmp_path}/r"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "r" / "reward_diagnostics.json").read_text())
    assert result["n_conflict_pairs"] == 1 and result["rewards"]["ours"]["inversion"] == 0.0
    table = (tmp_path / "r" / "reward_diagnostics.md").read_text()
    assert "| Micro (Eq. 10) | 100.0% |" in table and "| Ours (Eq. 12) | 0.0% | 0.0% |" in table
