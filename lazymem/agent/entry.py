"""Where `lazymem serve`, `lazymem mcp` and `Memory.from_config` start: compose the agent's config and
check it as every task's config is checked before anything loads.

The checks are the agent's settings (lazymem/agent/settings.py), `lazymem.validate` (ranges and names of
the method, retrieval and LLM keys) and preflight's model checks (lazymem.preflight.role_problems) for the
LLM roles the configured method calls, and for its retriever when it uses one. Only those roles: preflight
probes a vLLM role's build, which takes about 20 s, and `method=rag` calls no LLM at all. Whatever is
wrong is one ConfigError (lazymem.validate's), each of its problems one line naming its key; the commands
print them on one line, joined with "; " (settings.one_line).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig, open_dict

from lazymem.agent.settings import STORE_KIND_GONE, Settings
from lazymem.validate import ConfigError


def compose(overrides: Sequence[str] = ()) -> DictConfig:
    """The root config plus conf/agent/default.yaml (or the `+agent=NAME` among `overrides`), composed
    outside any Hydra app. A bad override is a ConfigError of one line (Hydra's spans several, and a
    missing config's lists the search path)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf.errors import OmegaConfBaseException

    from lazymem.conf import CONF_DIR

    overrides = list(overrides)
    refuse_gone_overrides(overrides)
    if not any(o.lstrip("+~").startswith("agent=") for o in overrides):
        overrides.insert(0, "+agent=default")
    try:
        with initialize_config_dir(str(CONF_DIR), version_base=None):
            return hydra_compose("config", overrides=overrides)
    except MissingConfigException as e:
        options = f"; choose one of {', '.join(e.options)}" if e.options else ""
        raise ConfigError([f"no config {e.missing_cfg_file!r}{options}"]) from None
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError([_one_line(str(e))]) from None


def refuse_gone_overrides(overrides: Sequence[str]) -> None:
    """Refuse, before composing, an override of a key that no longer exists and has a new form (Hydra's
    own error would only say that the key is not in the config)."""
    for override in overrides:
        if override.lstrip("+~").split("=", 1)[0] == "agent.store.kind":
            raise ConfigError([STORE_KIND_GONE])


def problems(cfg: DictConfig) -> list[str]:
    """What `cfg` gets wrong or misses, as `validate` and preflight say it, for the method it runs."""
    from hydra.utils import instantiate

    from lazymem.preflight import role_problems
    from lazymem.validate import problems as config_problems

    found = config_problems(cfg)
    if found:  # a method or retriever config with bad values need not even instantiate
        return found
    method = instantiate(cfg.method)
    return role_problems(_for_method(cfg, method.needs_retrieval), list(method.roles))


def check(cfg: DictConfig) -> Settings:
    """`cfg`'s settings, once the settings and every check of `problems` pass; a ConfigError otherwise."""
    settings = Settings.from_cfg(cfg)
    found = problems(cfg)
    if found:
        raise ConfigError([_one_line(p) for p in found])
    return settings


def load(overrides: Sequence[str] = ()) -> tuple[DictConfig, Settings]:
    """The composed and checked config of `overrides`, with its settings."""
    cfg = compose(overrides)
    return cfg, check(cfg)


def _for_method(cfg: DictConfig, needs_retrieval: bool) -> DictConfig:
    """`cfg` as preflight should see it: without `retrieval` when the method builds no retriever (its
    models then need not exist)."""
    if needs_retrieval or "retrieval" not in cfg:
        return cfg
    trimmed = copy.deepcopy(cfg)
    with open_dict(trimmed):
        del trimmed["retrieval"]
    return trimmed


def _one_line(text: Any) -> str:
    return " ".join(line.strip() for line in str(text).splitlines() if line.strip())
