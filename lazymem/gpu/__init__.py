"""GPU memory and placement: each model's memory estimated from its directory, the GPUs a job sees, and the
plans that give each of a job's models GPUs before it starts (docs/gpu-placement.md)."""
