"""Train the memory model: SFT (LLaMA-Factory's data and config), GRPO (grpo/: the reward, its curriculum and
the engines), the checkpoints' disk space, and the export to GGUF."""
