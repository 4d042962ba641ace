"""Launchable jobs. `python -m lazymem.run task=NAME` runs `lazymem.tasks.NAME.run(cfg, run_dir)`."""
