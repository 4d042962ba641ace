"""lazymem.agent.settings: the agent, serve and mcp blocks as typed settings, every bad value refused at once
with one line naming the key, and no configuration that would fail every request."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from lazymem.agent.entry import compose
from lazymem.agent.inputs import Limits
from lazymem.agent.settings import Settings, check_retention, one_line
from lazymem.validate import ConfigError

from agent_helpers import refused

SQLITE_STORE = "lazymem.agent.sqlite_store.SQLiteStore"
POSTGRES_STORE = "lazymem.agent.postgres_store.PostgresStore"


@pytest.fixture(scope="module")
def plain():
    """conf/agent/default.yaml composed as `lazymem serve` composes it, as plain containers."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(compose(), resolve=True)


def with_value(plain: dict, key: str, value) -> dict:
    cfg = copy.deepcopy(plain)
    *path, last = key.split(".")
    block = cfg
    for part in path:
        block = block[part]
    block[last] = value
    return cfg


def test_the_default_config_passes_and_is_typed(plain):
    s = Settings.from_cfg(compose())
    assert s == Settings.from_cfg(plain)
    assert s.agent.limits == Limits()  # the defaults of the class are the file's
    assert s.agent.store.target == SQLITE_STORE and s.agent.store.dir == s.agent.dir
    assert s.agent.store.pool_size is None and s.agent.retention_days is None
    assert s.serve.port == 8321 and s.serve.log_level == "info" and s.serve.idle_timeout_s == 5.0
    assert (s.mcp.tenant, s.mcp.user) == ("mcp", "default")
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.serve.port = 1


def test_an_override_on_the_command_line_is_checked():
    with pytest.raises(ConfigError) as e:
        Settings.from_cfg(compose(["agent.max_open_users=-1"]))
    assert one_line(e.value) == "agent.max_open_users: expected an integer >= 1, got -1"
    s = Settings.from_cfg(compose(["serve.log_level=WARNING", "serve.port=0", "agent.retention_days=30"]))
    assert (s.serve.log_level, s.serve.port, s.agent.retention_days) == ("warning", 0, 30.0)


BAD = [
    ("agent.dir", "", "expected a non-empty string"),
    ("agent.dir", None, "expected a non-empty string"),
    ("agent.store._target_", "", "expected a non-empty string without spaces, got ''"),
    ("agent.store.dir", None, "expected a non-empty string"),
    ("agent.store.idempotency_ttl_s", "1d", "expected a number of seconds > 0, got '1d'"),
    ("agent.max_open_users", -1, "expected an integer >= 1, got -1"),
    ("agent.max_open_users", True, "expected an integer >= 1, got True"),
    ("agent.max_open_messages", 2.5, "expected an integer >= 1, got 2.5"),
    ("agent.index_lease_s", float("inf"), "expected a number of seconds > 0, got inf"),
    ("agent.index_lease_s", float("nan"), "expected a number of seconds > 0, got nan"),
    ("agent.retention_days", -1, "expected a number of days >= 0 (or null: keep forever), got -1"),
    ("agent.retention_days", "30", "expected a number of days >= 0"),
    ("agent.retention_days", 10**400, "expected a number of days >= 0 (or null: keep forever), got 1000"),
    ("agent.store.forgotten_ttl_s", 0, "expected a number of seconds > 0 (or null), got 0"),
    ("agent.limits.max_messages_per_add", 0, "expected an integer >= 1, got 0"),
    ("agent.limits.max_text_chars", "many", "expected an integer >= 1, got 'many'"),
    ("agent.limits.max_question_chars", -5, "expected an integer >= 1, got -5"),
    ("agent.limits.max_id_chars", 5, "expected an integer from 9 to 1024"),
    ("agent.limits.max_id_chars", 5000, "16 KiB of request head the HTTP server reads), got 5000"),
    ("serve.host", "", "expected a non-empty string without spaces"),
    ("serve.host", "local host", "expected a non-empty string without spaces"),
    ("serve.port", 65536, "expected an integer from 0 to 65535, got 65536"),
    ("serve.port", -1, "expected an integer from 0 to 65535, got -1"),
    ("serve.port", "8321", "expected an integer from 0 to 65535, got '8321'"),
    ("serve.keys_file", "", "expected a non-empty string or null"),
    ("serve.keys_env", "NOT A NAME", "expected an environment variable name or null"),
    ("serve.max_body_bytes", 0, "expected an integer >= 80049"),
    ("serve.max_import_bytes", 1000, "expected an integer >= 1048576 (an import must hold"),
    ("serve.purge_every_s", 0, "expected a number of seconds > 0"),
    ("serve.maintain_every_s", -3, "expected a number of seconds > 0"),
    ("serve.purge_retry_s", None, "expected a number of seconds > 0, got null"),
    ("serve.refresh_every_s", "fast", "expected a number of seconds > 0"),
    ("serve.index_every_s", 0, "expected a number of seconds > 0"),
    ("serve.log_level", "loud", "expected one of critical, error, warning, info, debug, trace, got 'loud'"),
    ("serve.header_timeout_s", 0, "expected a number of seconds > 0"),
    ("serve.idle_timeout_s", 11, "expected a number of seconds > 0 and at most 10"),
    ("mcp.tenant", "", "it must be a non-empty string"),
    ("mcp.tenant", "t" * 201, "it is longer than 200 characters"),
    ("mcp.user", "bad\x00user", "it is not valid text"),
    ("mcp.user", 7, "it must be a non-empty string"),
]


@pytest.mark.parametrize(("key", "value", "expected"), BAD, ids=[f"{k}={v!r}"[:40] for k, v, _ in BAD])
def test_each_bad_value_is_refused_in_one_line_naming_its_key(plain, key, value, expected):
    with pytest.raises(ConfigError) as e:
        Settings.from_cfg(with_value(plain, key, value))
    message = one_line(e.value)
    assert message.startswith(f"{key}: ") and expected in message, message
    assert "\n" not in message


def test_no_configuration_fails_every_request_later(plain):
    # a body bound that could not carry one message of the longest text (in any script: 4 bytes a char)
    small = with_value(plain, "serve.max_body_bytes", 20000)
    with refused(r"^serve.max_body_bytes: .*max_text_chars"):
        Settings.from_cfg(small)
    small["agent"]["limits"].update(max_text_chars=4000, max_question_chars=4000)
    assert Settings.from_cfg(small).serve.max_body_bytes == 20000
    # the MCP ids pass the checks a request's ids pass, under the configured bound
    short = with_value(plain, "agent.limits.max_id_chars", 10)
    short["mcp"]["user"] = "a-user-id-of-23-letters"
    with refused(r"^mcp.user: .*max_id_chars=10.*longer than 10"):
        Settings.from_cfg(short)
    # an idle timeout the request-head timeout would always cut short
    with refused(r"^serve.idle_timeout_s: .*header_timeout_s"):
        Settings.from_cfg(
            with_value(with_value(plain, "serve.header_timeout_s", 2), "serve.idle_timeout_s", 3)
        )


@pytest.fixture(scope="module")
def postgres():
    """The default config with agent/store=postgres, as plain containers (no DSN in the environment)."""
    from omegaconf import OmegaConf

    with pytest.MonkeyPatch.context() as env:
        env.delenv("LAZYMEM_STORE_DSN", raising=False)
        return OmegaConf.to_container(compose(["agent/store=postgres"]), resolve=True)


POSTGRES_BAD = [
    ("agent.store.pool_size", 0, "expected an integer >= 1, got 0"),
    ("agent.store.wait_s", 0, "expected a number of seconds > 0, got 0"),
    ("agent.store.idempotency_ttl_s", None, "expected a number of seconds > 0, got null"),
]


@pytest.mark.parametrize(("key", "value", "expected"), POSTGRES_BAD, ids=[k for k, _, _ in POSTGRES_BAD])
def test_each_bad_postgres_value_is_refused_naming_its_key(postgres, key, value, expected):
    good = with_value(postgres, "agent.store.dsn", "postgresql://me@db.example:5432/lazymem")
    with pytest.raises(ConfigError) as e:
        Settings.from_cfg(with_value(good, key, value))
    assert one_line(e.value) == f"{key}: {expected}"


def test_the_store_group_lands_at_agent_store_and_each_store_takes_only_its_keys(plain, postgres):
    assert "store" not in plain and plain["agent"]["store"]["_target_"] == SQLITE_STORE
    assert postgres["agent"]["store"]["_target_"] == POSTGRES_STORE and "store" not in postgres
    assert set(postgres["agent"]["store"]) == {
        "_target_",
        "dsn",
        "pool_size",
        "wait_s",
        "idempotency_ttl_s",
        "forgotten_ttl_s",
    }
    sqlite_with_dsn = with_value(plain, "agent.store.dsn", "postgresql://me@db.example/lazymem")
    with refused(r"^agent.store.dsn: unknown key \(known: _target_, dir, "):
        Settings.from_cfg(sqlite_with_dsn)
    postgres_with_dir = with_value(postgres, "agent.store.dsn", "postgresql://me@db.example/lazymem")
    postgres_with_dir["agent"]["store"]["dir"] = "/tmp"
    with refused(r"^agent.store.dir: unknown key"):
        Settings.from_cfg(postgres_with_dir)
    # a store class of your own gets its keys as they are: its constructor checks them
    own = copy.deepcopy(plain)
    own["agent"]["store"] = {"_target_": "my_pkg.MyStore", "anything": 1}
    assert Settings.from_cfg(own).agent.store.target == "my_pkg.MyStore"


def test_a_config_that_still_names_the_store_by_kind_is_refused_naming_the_new_form(plain):
    """Its own agent file, or an appended override (lazymem/agent/entry.py refuses the others)."""
    message = "agent.store.kind is gone: choose the store with agent/store=postgres (or agent/store=sqlite)"
    with pytest.raises(ConfigError) as e:
        Settings.from_cfg(with_value(plain, "agent.store.kind", "postgres"))
    assert one_line(e.value) == message


def test_a_postgres_store_needs_a_dsn_that_parses_and_never_shows_it(postgres):
    with refused(r"^agent.store.dsn: .*agent/store=postgres needs one\), got null$"):
        Settings.from_cfg(postgres)
    secret = "user:hunter2-password@nowhere no-equals-sign"
    with pytest.raises(ConfigError) as e:
        Settings.from_cfg(with_value(postgres, "agent.store.dsn", secret))
    assert one_line(e.value).startswith("agent.store.dsn: ") and "hunter2" not in str(e.value)
    good = with_value(postgres, "agent.store.dsn", "postgresql://me@db.example:5432/lazymem")
    assert Settings.from_cfg(good).agent.store.dsn == "postgresql://me@db.example:5432/lazymem"
    with refused(r"^agent.store.dsn: .*got ' '$"):
        Settings.from_cfg(with_value(postgres, "agent.store.dsn", " "))


def test_unknown_and_missing_keys_are_refused(plain):
    typo = copy.deepcopy(plain)
    typo["serve"]["max_body_byte"] = 10
    with refused(r"^serve.max_body_byte: unknown key \(known: .*max_body_bytes"):
        Settings.from_cfg(typo)
    gone = copy.deepcopy(plain)
    del gone["agent"]["store"]["idempotency_ttl_s"]
    with refused(r"^agent.store.idempotency_ttl_s: missing"):
        Settings.from_cfg(gone)
    with refused(r"^mcp: expected a mapping, got 'x'"):
        Settings.from_cfg(with_value(plain, "mcp", "x"))


def test_check_retention():
    assert (
        check_retention(None, "w") is None
        and check_retention(0, "w") == 0.0
        and check_retention(2, "w") == 2.0
    )
    for bad in (-0.5, float("inf"), True, "7"):
        with refused(r"^where: expected a number of days"):
            check_retention(bad, "where")
