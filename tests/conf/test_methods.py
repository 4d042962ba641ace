"""conf/method/*.yaml instantiate to their method classes."""

from __future__ import annotations

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from lazymem.conf import CONF_DIR
from lazymem.methods.full_history import FullHistory
from lazymem.methods.nanomemory import NanoMemory
from lazymem.methods.oracle_session import OracleSession


@pytest.mark.parametrize(
    ("name", "cls"),
    [("oracle_session", OracleSession), ("full_history", FullHistory), ("nanomemory", NanoMemory)],
)
def test_method_configs_instantiate(name, cls):
    method = instantiate(OmegaConf.load(CONF_DIR / "method" / f"{name}.yaml"))
    assert isinstance(method, cls) and method.name == name
