"""lazymem.agent.telemetry: the memory operations' spans and metrics, recorded into the SDK's in-memory
exporter and reader (tests/helpers_telemetry.py): a span per operation with its gen_ai attributes, counts and
error codes; nothing of a message, a question, a key or a user id anywhere, through HTTP and MCP too; nothing
at all when it is off; the settings that switch it on. Retrieval only (method=rag, the bundled MiniLM)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from lazymem.agent.entry import compose
from lazymem.agent.errors import BadInput, UnknownMessages, UnknownUser
from lazymem.agent.moving import ImportStopped
from lazymem.agent.settings import Settings, TelemetrySettings, one_line
from lazymem.agent.telemetry import Telemetry, store_id
from lazymem.validate import ConfigError

from agent_helpers import ROOT
from helpers_telemetry import KEY, TRACEPARENT, Recorded, http_client, mcp_calls, rag_memory


@pytest.fixture(scope="module")
def memory(tmp_path_factory):
    with rag_memory(tmp_path_factory.mktemp("telemetry")) as m:
        yield m


@pytest.fixture
def recorded(memory):
    rec = Recorded(memory)
    yield rec
    rec.close()


@pytest.fixture
def http(memory, recorded):
    return http_client(memory)  # after `recorded`: the app traces its requests only if telemetry is on


# ---- the memory operations


def test_each_operation_is_a_span_named_by_its_gen_ai_operation_with_its_counts(memory, recorded):
    folder = memory.open_users.folder("default", "ops-user").name
    two = [{"role": "user", "text": "I live in Lyon."}, {"role": "user", "text": "Hi"}]
    ids = memory.add("ops-user", two)
    found = memory.query("ops-user", "Where do I live?")
    assert memory.forget("ops-user", ids[:1]) == 1
    assert len(memory.export("ops-user")) == 1
    again = [{"role": "user", "text": "a", "source": "s1"}, {"role": "user", "text": "b", "source": "s2"}]
    memory.import_("ops-user", again[:1])
    memory.import_("ops-user", again)  # s1 is skipped as already stored
    assert memory.forget_all("ops-user") == 3

    spans = recorded.finished()
    assert [s.name for s in spans] == [
        "create_memory",
        "search_memory",
        "delete_memory",
        "export_memory",
        "upsert_memory",
        "upsert_memory",
        "delete_memory",
    ]
    for span in spans:
        assert span.kind is SpanKind.INTERNAL and span.status.status_code is StatusCode.UNSET
        assert span.attributes["gen_ai.operation.name"] == span.name
        assert span.attributes["gen_ai.memory.store.id"] == folder == store_id("default", "ops-user")
        assert span.attributes["lazymem.tenant"] == "default" and "error.type" not in span.attributes
    counts = [s.attributes["gen_ai.memory.record.count"] for s in spans]
    assert counts == [2, len(found.messages), 1, 1, 1, 2, 3]
    assert len(found.messages) == 2
    assert recorded.counted("create_memory") == {"stored": 2}
    assert recorded.counted("search_memory") == {"returned": 2}
    assert recorded.counted("delete_memory") == {"deleted": 4}
    assert recorded.counted("export_memory") == {"exported": 1}
    assert recorded.counted("upsert_memory") == {"stored": 2, "skipped": 1}
    durations = recorded.points("lazymem.memory.operation.duration")
    assert {a["gen_ai.operation.name"]: p.count for a, p in durations} == {
        "create_memory": 1,
        "search_memory": 1,
        "delete_memory": 2,
        "export_memory": 1,
        "upsert_memory": 2,
    }


def test_a_replayed_add_counts_its_messages_as_skipped_not_stored(memory, recorded):
    message = [{"role": "user", "text": "once"}]
    first = memory.add("replay-user", message, idempotency_key="k-1")
    assert memory.add("replay-user", message, idempotency_key="k-1") == first
    assert recorded.counted("create_memory") == {"stored": 1, "skipped": 1}
    memory.forget_all("replay-user")


def test_a_failure_carries_its_code_as_error_type_and_the_span_is_an_error(memory, recorded):
    with pytest.raises(UnknownUser):
        memory.query("nobody-here", "anything?")
    with pytest.raises(BadInput):
        memory.add("bad-user", [{"role": "user", "text": "x", "mood": "happy"}])
    memory.add("fail-user", [{"role": "user", "text": "kept"}])
    with pytest.raises(UnknownMessages):
        memory.forget("fail-user", [10**12])
    lines = [{"role": "user", "text": "ok", "source": "f1"}, {"role": "user", "text": " "}]
    with pytest.raises(ImportStopped):
        memory.import_("fail-user", lines, batch_size=1)
    failed = [s for s in recorded.finished() if s.status.status_code is StatusCode.ERROR]
    assert [(s.name, s.attributes["error.type"]) for s in failed] == [
        ("search_memory", "unknown_user"),
        ("create_memory", "bad_input"),
        ("delete_memory", "unknown_messages"),
        ("upsert_memory", "bad_input"),
    ]
    assert all(s.status.description is None and not s.events for s in failed)  # no message, no exception
    assert recorded.counted("upsert_memory") == {"stored": 1}  # the batch before the bad line is kept
    errors = {
        (a["gen_ai.operation.name"], a.get("error.type"))
        for a, _ in recorded.points("lazymem.memory.operation.duration")
    }
    assert ("search_memory", "unknown_user") in errors and ("create_memory", None) in errors
    memory.forget_all("fail-user")


# ---- what is never recorded


def test_no_text_question_key_or_user_id_reaches_a_span_or_a_metric(memory, recorded, http):
    user, text, question = "canary-user-7f3a", "canary text 91c2", "canary question 4d8e"
    http.post(f"/v1/users/{user}/messages?key={KEY}", json={"messages": [{"role": "user", "text": text}]})
    http.post(f"/v1/users/{user}/query", json={"question": question}, headers={"traceparent": TRACEPARENT})
    http.post(f"/v1/users/{user}/forget", json={"message_ids": [10**12]})
    http.get(f"/v1/users/{user}/export")
    with pytest.raises(UnknownUser):
        memory.query(f"{user}-absent", question)
    asyncio.run(
        mcp_calls(
            memory,
            [
                ("remember", {"text": text, "user_id": user}, {"traceparent": TRACEPARENT}),
                ("recall", {"question": question, "user_id": user}, None),
                ("recall", {"question": question, "user_id": f"{user}-absent"}, None),
            ],
        )
    )
    http.delete(f"/v1/users/{user}")
    assert len(recorded.finished()) >= 13
    dumped = [span.to_json() for span in recorded.finished()]
    dumped.append(recorded.reader.get_metrics_data().to_json())
    for canary in (user, text, question, KEY):
        assert not [d for d in dumped if canary in d], canary


# ---- off


def test_off_it_records_nothing_builds_nothing_and_imports_no_sdk(memory, monkeypatch):
    threads = {t.name for t in threading.enumerate()}
    off = Telemetry.from_settings(TelemetrySettings())
    assert not off.enabled and off._tracer_provider is None and off._meter_provider is None
    assert {t.name for t in threading.enumerate()} <= threads  # no batch or metric thread
    assert not memory.telemetry.enabled  # what a Memory gets unless agent.telemetry.enabled

    def never(*args, **kwargs):
        raise AssertionError("traced while telemetry is off")

    monkeypatch.setattr(Telemetry, "operation", never)
    monkeypatch.setattr(Telemetry, "pages", never)
    ids = memory.add("off-user", [{"role": "user", "text": "quiet"}])
    assert memory.query("off-user", "quiet?").messages and memory.export("off-user")
    assert memory.forget("off-user", ids) == 1
    code = (
        "import sys; import lazymem.agent.service, lazymem.agent.mcp_server;"
        "from lazymem.agent.telemetry import Telemetry; from lazymem.agent.settings import TelemetrySettings;"
        "Telemetry.from_settings(TelemetrySettings());"
        "print([m for m in sys.modules if m.startswith(('opentelemetry.sdk', 'opentelemetry.exporter'))])"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---- the settings


def _settings(**telemetry) -> Settings:
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(compose(), resolve=True)
    cfg["agent"]["telemetry"].update(telemetry)
    return Settings.from_cfg(cfg)


def test_the_settings_are_off_by_default_and_each_bad_value_names_its_key():
    assert _settings().agent.telemetry == TelemetrySettings()
    on = _settings(enabled=True, endpoint="https://otel.internal:4318/", metrics_every_s=5)
    assert on.agent.telemetry.enabled and on.agent.telemetry.metrics_every_s == 5.0
    for key, value, expected in [
        ("enabled", "yes", "agent.telemetry.enabled: expected true or false, got 'yes'"),
        ("endpoint", "localhost:4318", "agent.telemetry.endpoint: expected an http:// or https:// URL"),
        ("endpoint", "http://h:4318/?a=b", "agent.telemetry.endpoint: expected an http:// or https:// URL"),
        ("metrics_every_s", 0, "agent.telemetry.metrics_every_s: expected a number of seconds > 0"),
        ("timeout_s", "5", "agent.telemetry.timeout_s: expected a number of seconds > 0"),
        ("service_name", "", "agent.telemetry.service_name: expected a non-empty string"),
        ("sample", 1, "agent.telemetry.sample: unknown key"),
    ]:
        with pytest.raises(ConfigError) as e:
            _settings(**{key: value})
        assert one_line(e.value).startswith(expected), one_line(e.value)
    with pytest.raises(ConfigError) as e:
        _settings(endpoint="ftp://user:hunter2@collector")
    assert "hunter2" not in str(e.value)
