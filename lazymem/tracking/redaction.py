"""Secrets never reach W&B: secret-looking config keys are redacted as in config.yaml, and the values of
the environment variables a config names as holding keys (`*key_env`) are replaced wherever they appear
(config, logged values, the command line W&B records)."""

from __future__ import annotations

import sys
from contextlib import contextmanager

from omegaconf import DictConfig, OmegaConf

from lazymem.rundir import REDACTED, SECRET_KEY, redact, secret_values


def scrub_values(node, secrets: list[str]):
    """A copy of a plain container with every secret value replaced inside its strings."""
    if not secrets:
        return node
    if isinstance(node, dict):
        return {k: scrub_values(v, secrets) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return [scrub_values(v, secrets) for v in node]
    if isinstance(node, str):
        for s in secrets:
            node = node.replace(s, REDACTED)
    return node


def wandb_config(cfg: DictConfig) -> dict:
    """What config.yaml holds (secret-looking keys redacted), with the values of key variables removed."""
    return scrub_values(redact(OmegaConf.to_container(cfg, resolve=True)), secret_values(cfg))


def redacted_argv(argv: list[str], secrets: list[str]) -> list[str]:
    """The command line without secrets: `...api_key=VALUE` overrides blanked, key values replaced."""
    out = []
    for arg in argv:
        key, eq, value = arg.partition("=")
        if eq and value and SECRET_KEY.search(key.split(".")[-1]):
            arg = f"{key}={REDACTED}"
        out.append(scrub_values(arg, secrets))
    return out


@contextmanager
def shown_argv(argv: list[str]):
    """W&B records sys.argv when a run starts: show it the redacted one."""
    saved = sys.argv[:]
    sys.argv[:] = argv
    try:
        yield
    finally:
        sys.argv[:] = saved
