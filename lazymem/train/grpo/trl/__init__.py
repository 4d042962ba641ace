"""The TRL 1.16 engine (train/grpo=trl): GRPOTrainer in one process."""
