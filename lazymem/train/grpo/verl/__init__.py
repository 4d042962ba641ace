"""The VERL 0.9.1 engine (train/grpo=verl, paper mode)."""
