"""Train the memory model: RL rows, the GRPO reward (gate, action, quality), curriculum, diagnostics."""
