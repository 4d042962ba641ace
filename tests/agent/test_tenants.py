"""lazymem.agent.tenants: API keys from the keys file and the environment, checked at start-up (no message
quotes a key), keys ending in `=`, reloads that swap at once or keep the old keys, and the redaction of keys
from log text. SIGHUP through a running server: tests/agent/test_http_server.py."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from lazymem.agent.settings import one_line
from lazymem.agent.tenants import Tenant, Tenants, install_reload
from lazymem.validate import ConfigError

from agent_helpers import refused

ENV = "LAZYMEM_TEST_KEYS"


def load(tmp_path, monkeypatch, file: str | None, env: str | None = None, retention=None, max_id_chars=200):
    if env is not None:
        monkeypatch.setenv(ENV, env)
    else:
        monkeypatch.delenv(ENV, raising=False)
    path = None
    if file is not None:
        path = tmp_path / "keys.yaml"
        path.write_text(file)
    return Tenants.load(str(path) if path else None, ENV, retention, max_id_chars)


def test_keys_from_the_file_and_the_environment(tmp_path, monkeypatch):
    tenants = load(
        tmp_path,
        monkeypatch,
        "acme: {keys: [key-acme-1, 'key-acme-2'], retention_days: 30}\nidle: {keys: []}\n",
        " c2VjcmV0LWtleQ===acme , x=y=z=beta,,",
        retention=7,
    )
    assert len(tenants) == 4
    assert tenants.lookup("key-acme-1") == tenants.lookup("key-acme-2") == Tenant("acme", 30.0)
    # split at the LAST `=`: base64 padding stays in the key; an env key of a file tenant joins it
    assert tenants.lookup("c2VjcmV0LWtleQ==") == Tenant("acme", 30.0)
    assert tenants.lookup("x=y=z") == Tenant("beta", 7.0)
    assert tenants.lookup("c2VjcmV0LWtleQ") is None and tenants.lookup("beta") is None
    assert tenants.all == {
        "acme": Tenant("acme", 30.0),
        "idle": Tenant("idle", 7.0),
        "beta": Tenant("beta", 7.0),
    }


REFUSED = [
    ("acme: {keys: ['key with space']}", None, "acme', keys[0]: character 4 of the key is whitespace"),
    ('acme: {keys: ["tab-at-end\\t"]}', None, "keys[0]: character 11 of the key is whitespace"),
    (
        "acme: {keys: [ok-key, 'clé-1']}",
        None,
        "acme', keys[1]: character 3 of the key is not printable ASCII",
    ),
    ("acme: {keys: [12345]}", None, "keys[0]: expected a string (quote it in YAML), got int"),
    ("acme: {keys: ['']}", None, "keys[0]: an empty key"),
    ("a=b: {keys: [key-1]}", None, "tenant 'a=b': a tenant name may not hold '='"),
    (f"{'t' * 30}: {{keys: [key-1]}}", None, "the tenant name is longer than 20 characters"),
    ("acme: {keys: [key-1], days: 3}", None, "tenant 'acme' has unknown fields ['days']"),
    ("acme: {keys: [key-1], retention_days: -1}", None, "acme', retention_days: expected a number of days"),
    (
        f"acme: {{keys: [key-1], retention_days: {'9' * 401}}}",
        None,
        "acme', retention_days: expected a number",
    ),
    ("acme: [key-1]", None, "tenant 'acme' needs a list `keys`"),
    ("- key-1", None, "expected a mapping TENANT ->"),
    (
        "acme: {keys: [key-1]}\nbeta: {keys: [key-1]}",
        None,
        "beta', keys[0]: the key is also one of tenant 'acme'",
    ),
    (None, "key-1=acme,key 2=beta", f"${ENV}: pair 1, tenant 'beta': character 4 of the key is whitespace"),
    (None, "key-1=acme,key-2", f"${ENV}: pair 1: expected KEY=TENANT"),
    (None, "=acme", f"${ENV}: pair 0: expected KEY=TENANT"),
    (None, "key-1=", f"${ENV}: pair 0, tenant '': the tenant name must be a non-empty string"),
    (
        "acme: {keys: [key-1]}",
        "key-1=beta",
        f"${ENV}: pair 0, tenant 'beta': the key is also one of tenant 'acme'",
    ),
]


@pytest.mark.parametrize(("file", "env", "expected"), REFUSED)
def test_bad_entries_are_refused_naming_the_tenant_and_the_keys_position(
    tmp_path, monkeypatch, file, env, expected
):
    with pytest.raises(ConfigError) as e:
        load(tmp_path, monkeypatch, file, env, max_id_chars=20)
    message = one_line(e.value)
    assert expected in message and "\n" not in message, message
    for key in ("key with space", "tab-at-end", "clé-1", "key 2", "key-1", "key-2"):
        assert key not in str(e.value)


def test_a_keys_file_that_is_missing_or_not_yaml_is_refused_without_quoting_it(tmp_path, monkeypatch):
    with refused(r"^serve.keys_file: cannot read .*missing.yaml: No such file"):
        Tenants.load(str(tmp_path / "missing.yaml"), None, None, 200)
    with pytest.raises(ConfigError) as e:
        load(tmp_path, monkeypatch, "acme: {keys: [secret-key-123, oops\n")
    assert "not valid YAML at line 2" in one_line(e.value) and "secret-key-123" not in str(e.value)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"\xff\xfeacme: {keys: [secret-key-123]}\n")
    with refused(r"^serve.keys_file: .*latin.yaml is not UTF-8 text \(byte 0\)$"):
        Tenants.load(str(latin), None, None, 200)


def test_a_reload_swaps_the_keys_at_once(tmp_path, monkeypatch, caplog):
    tenants = load(tmp_path, monkeypatch, "acme: {keys: [old-key-1, kept-key-1]}\n")
    (tmp_path / "keys.yaml").write_text("acme: {keys: [kept-key-1, new-key-1]}\n")
    with caplog.at_level(logging.INFO, "lazymem.agent.tenants"):
        assert tenants.reload()
    assert tenants.lookup("old-key-1") is None  # revoked: refused from the next lookup on
    assert tenants.lookup("new-key-1") == tenants.lookup("kept-key-1") == Tenant("acme")
    assert "API keys reloaded: 2 keys of 1 tenants" in caplog.text


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("acme: {keys: [new-key-1, 'bad key']}\n", "keys[1]: character 4 of the key is whitespace"),
        ("acme: {keys: [new-key-1\n", "not valid YAML"),
        ("", "no API keys left"),
    ],
)
def test_a_failed_reload_keeps_the_old_keys_and_logs_one_line(tmp_path, monkeypatch, caplog, text, why):
    tenants = load(tmp_path, monkeypatch, "acme: {keys: [old-key-1]}\n")
    (tmp_path / "keys.yaml").write_text(text)
    with caplog.at_level(logging.INFO, "lazymem.agent.tenants"):
        assert not tenants.reload()
    assert tenants.lookup("old-key-1") == Tenant("acme") and tenants.lookup("new-key-1") is None
    (record,) = caplog.records
    assert record.levelname == "ERROR" and "\n" not in record.getMessage()
    assert "API keys not reloaded, the old ones stay" in record.getMessage() and why in record.getMessage()
    (tmp_path / "keys.yaml").unlink()
    assert not tenants.reload() and tenants.lookup("old-key-1") == Tenant("acme")


def test_redact_finds_keys_as_written_and_percent_encoded():
    tenants = Tenants({"c2VjcmV0K2tleS8=": Tenant("a"), "xab": Tenant("b"), "abcdef": Tenant("b")})
    assert tenants.redact("GET /v1/users/c2VjcmV0K2tleS8=/query") == "GET /v1/users/[redacted]/query"
    assert tenants.redact("/v1/users/c2VjcmV0K2tleS8%3D/q") == "/v1/users/[redacted]/q"
    assert tenants.redact("/u/%63%32VjcmV0K2tleS8%3d and 100%") == "/u/[redacted] and 100%"
    assert tenants.redact("/u/c2VjcmV0K2tleS8%253D/q") == "/u/[redacted]/q"  # encoded twice
    assert tenants.redact("overlapping: xabcdef.") == "overlapping: [redacted]."  # not "[redacted]cdef"
    assert tenants.redact("no key, 100% sure") == "no key, 100% sure"
    assert Tenants({}).redact("anything") == "anything"


def test_install_reload_outside_the_main_thread_does_nothing():
    loop = asyncio.new_event_loop()
    undo = []
    thread = threading.Thread(target=lambda: undo.append(install_reload(Tenants({}), loop)))
    thread.start()
    thread.join()
    undo[0]()
    loop.close()
