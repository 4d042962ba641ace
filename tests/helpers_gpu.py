"""The paper experiments' jobs as a GPU plan checks them, and the GPUs people have, for tests/gpu/."""

from __future__ import annotations

from hydra import compose, initialize_config_dir

from lazymem.conf import CONF_DIR
from lazymem.llm.llm_set import role_config
from lazymem.preflight import roles_used
from lazymem.tasks.evaluate import build_methods

# the roles of the tasks that take no methods (evaluate and main_table: their methods' roles)
TASK_ROLES = {"perturbation": ["answer", "judge"], "reward_rollouts": ["memory"], "coverage": []}
TASK_ROLES |= {"build_sft": ["teacher"], "build_rl": []}
# the GPUs people have, as nvidia-smi reports them: an H200 141 GB, H100 80GB, L40S 48 GB, A100 40GB
H200, H100, L40S, A100_40 = 140.4, 79.6, 45.0, 40.0


def job(experiment: str, *overrides: str):
    """(config, roles) of an experiment as its task would check it."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[f"+experiment={experiment}", *overrides])
    if cfg.task in ("evaluate", "main_table"):
        return cfg, roles_used(build_methods(cfg))
    return cfg, TASK_ROLES.get(cfg.task, [])


def large(cfg) -> dict:
    """Qwen3-32B's server options (the answer role's)."""
    return role_config(cfg.llm, "answer")["vllm"]
