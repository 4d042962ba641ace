"""GRPO on the memory model (paper Section 3.3): what every engine shares (the contract, the reward and its
curriculum, the RL rows, the validation log and the checkpoint choice), and one folder per engine."""
