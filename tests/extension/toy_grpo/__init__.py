"""A GRPO engine defined outside lazymem: this folder and conf/train/grpo/toy.yaml are all it takes."""
