"""The async client against a local HTTP server that misbehaves on purpose."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lazymem.llm.backends import get_dialect
from lazymem.llm.cache import LLMCache
from lazymem.llm.client import (
    ClientConfig,
    Decoding,
    LLMClient,
    MissingApiKey,
    ProviderRefused,
    json_schema_format,
)
from lazymem.llm.completion import Completion

from standin import StandinServer

MSGS = [{"role": "user", "content": "hi"}]


def reply(text: str | None = "hello", finish: str = "stop", pt: int = 3, ct: int = 2, **message) -> dict:
    return {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, **message},
                "finish_reason": finish,
            }
        ],
        "usage": {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct},
    }


class FakeAPI:
    """``behave(n, body)`` -> (status, body, delay_s, headers) for the n-th POST (0-based)."""

    def __init__(self, behave):
        self.behave = behave
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.inflight = self.max_inflight = 0
        self.lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with api.lock:
                    n = len(api.bodies)
                    api.bodies.append(body)
                    api.headers.append({k.lower(): v for k, v in self.headers.items()})
                    api.inflight += 1
                    api.max_inflight = max(api.max_inflight, api.inflight)
                try:
                    status, payload, delay, headers = api.behave(n, body)
                    time.sleep(delay)
                finally:  # done before the reply is sent: once it is, the client may send its next
                    with api.lock:  # request, which would otherwise count as in flight beside this one
                        api.inflight -= 1
                try:
                    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                    self.send_response(status)
                    headers = {"Content-Type": "application/json", **headers}
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def api():
    servers = []

    def make(behave):
        servers.append(FakeAPI(behave))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def client(url: str, cache: LLMCache | None = None, **kw) -> LLMClient:
    base = {"max_retries": 2, "backoff_base_s": 0.1, "backoff_cap_s": 1.0, "timeout_s": 5.0}
    return LLMClient(ClientConfig(base_url=url, served_name="m", **{**base, **kw}), cache=cache)


def run(coro):
    return asyncio.run(coro)


def test_stats_say_which_server_answered_without_credentials():
    class Server:
        kind = "vllm"

    cfg = ClientConfig(base_url="http://user:secret@gpu-node:8000/v1", served_name="qwen3-32b", model_id="/m")
    by = LLMClient(cfg, server=Server()).stats()["server"]
    assert by == {
        "kind": "vllm",
        "base_url": "http://gpu-node:8000/v1",
        "served_name": "qwen3-32b",
        "model_id": "/m",
        "dialect": "openai",
        "answered_as": {},
    }
    hosted = ClientConfig(base_url="https://api.deepseek.com/v1", served_name="d", dialect="deepseek")
    assert LLMClient(hosted).stats()["server"]["kind"] == "endpoint"
    assert "secret" not in json.dumps(LLMClient(cfg).stats())


def test_close_closes_the_http_client_on_its_own_loop(api):
    srv = api(lambda n, b: (200, reply("ok"), 0, {}))
    c = client(srv.url)
    run(c.chat(MSGS))  # its loop is closed now: the connections went with it
    c.close()
    assert c._client is None
    loop = asyncio.new_event_loop()  # a loop that keeps running (the agent service's)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(c.chat(MSGS), loop).result(10)
    http = c._client
    c.close()  # from another thread: scheduled on the client's loop
    deadline = time.monotonic() + 5
    while not http.is_closed() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert http.is_closed() and c._client is None
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def test_success_records_text_usage_and_request(api):
    srv = api(lambda n, b: (200, reply("Paris", pt=11, ct=4), 0, {}))
    c = client(srv.url, decoding=Decoding(temperature=0.0, top_p=0.9, max_tokens=7, seed=5))
    out = run(c.chat(MSGS))
    assert (out.text, out.prompt_tokens, out.completion_tokens, out.attempts) == ("Paris", 11, 4, 1)
    assert out.ok and not out.cached and out.finish_reason == "stop" and out.latency_s > 0
    body = srv.bodies[0]
    assert body["model"] == "m" and body["messages"] == MSGS
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"]) == (0.0, 0.9, 7, 5)
    assert c.stats()["prompt_tokens"] == 11


def test_500_then_success_is_retried(api):
    srv = api(lambda n, b: (500, {"error": "boom"}, 0, {}) if n == 0 else (200, reply("ok"), 0, {}))
    out = run(client(srv.url).chat(MSGS))
    assert out.ok and out.text == "ok" and out.attempts == 2 and len(srv.bodies) == 2


def test_always_500_records_error_after_retries_with_backoff(api):
    srv = api(lambda n, b: (500, {"error": "boom"}, 0, {}))
    c = client(srv.url, max_retries=3, backoff_base_s=0.2, backoff_cap_s=0.4)
    t0 = time.monotonic()
    out = run(c.chat(MSGS))
    elapsed = time.monotonic() - t0
    assert not out.ok and out.text == "" and "HTTP 500" in out.error and "boom" in out.error
    assert out.attempts == 4 and len(srv.bodies) == 4
    # waits are uniform in [d/2, d] with d = 0.2, 0.4, 0.4 (capped): at least 0.5 s, at most 1.0 s
    assert 0.5 <= elapsed < 2.5
    assert c.stats()["errors"] == 1 and c.stats()["retries"] == 3


def test_timeout_of_a_slow_server(api):
    srv = api(lambda n, b: (200, reply("late"), 3.0, {}))
    t0 = time.monotonic()
    out = run(client(srv.url, timeout_s=0.3, max_retries=1).chat(MSGS))
    assert not out.ok and "timeout" in out.error and out.attempts == 2
    assert time.monotonic() - t0 < 2.5


@pytest.mark.parametrize(
    "payload,ctype",
    [
        (b"<html>bad gateway</html>", "text/html"),
        (b"{not json", "application/json"),
        (b'{"foo": 1}', "application/json"),
    ],
)
def test_malformed_body_is_an_error_not_an_answer(api, payload, ctype):
    srv = api(lambda n, b: (200, payload, 0, {"Content-Type": ctype}))
    out = run(client(srv.url, max_retries=1).chat(MSGS))
    assert not out.ok and "malformed" in out.error and out.text == ""
    assert out.attempts == 2  # a garbled body may be transient: retried


def test_client_errors_are_not_retried(api):
    srv = api(lambda n, b: (400, {"error": "bad request"}, 0, {}))
    out = run(client(srv.url).chat(MSGS))
    assert not out.ok and "HTTP 400" in out.error and out.attempts == 1 and len(srv.bodies) == 1


def test_empty_completion_is_an_error(api):
    srv = api(lambda n, b: (200, reply(None, finish="length"), 0, {}))
    out = run(client(srv.url).chat(MSGS))
    assert not out.ok and "empty" in out.error and "length" in out.error and out.attempts == 1


def test_retry_after_header_is_honoured(api):
    srv = api(
        lambda n, b: (
            (429, {"error": "slow down"}, 0, {"Retry-After": "0.6"}) if n == 0 else (200, reply(), 0, {})
        )
    )
    t0 = time.monotonic()
    out = run(client(srv.url, backoff_base_s=0.01, backoff_cap_s=5).chat(MSGS))
    assert out.ok and out.attempts == 2 and time.monotonic() - t0 >= 0.3


def test_concurrency_bound_is_respected(api):
    srv = api(lambda n, b: (200, reply("echo " + b["messages"][0]["content"]), 0.15, {}))
    c = client(srv.url, concurrency=3)

    async def many():
        return await asyncio.gather(*(c.chat([{"role": "user", "content": str(i)}]) for i in range(12)))

    outs = run(many())
    assert all(o.ok for o in outs) and len(srv.bodies) == 12
    assert srv.max_inflight == 3
    assert [o.text for o in outs] == [f"echo {i}" for i in range(12)]  # input order


def test_clients_of_one_endpoint_share_its_concurrency_bound(api, tmp_path):
    # the agent service builds one client per user (each with its own cache) over the one model server
    srv = api(lambda n, b: (200, reply("ok"), 0.1, {}))
    users = [client(srv.url, concurrency=1, cache=LLMCache(tmp_path / f"u{i}.sqlite")) for i in range(4)]
    other = api(lambda n, b: (200, reply("ok"), 0.1, {}))
    elsewhere = client(other.url, concurrency=1)

    async def all_users():
        calls = [
            c.chat([{"role": "user", "content": f"{i}-{k}"}]) for i, c in enumerate(users) for k in range(2)
        ]
        return await asyncio.gather(
            *calls, elsewhere.chat(MSGS), elsewhere.chat([{"role": "user", "content": "b"}])
        )

    outs = run(all_users())
    assert all(o.ok for o in outs) and len(srv.bodies) == 8
    assert srv.max_inflight == 1  # not one per client
    assert other.max_inflight == 1 and len(other.bodies) == 2  # another endpoint has its own bound


def test_thinking_budget_and_structured_output_per_dialect(api):
    srv = api(lambda n, b: (200, reply("[]"), 0, {}))
    schema = {"type": "array", "items": {"type": "object"}}
    dec = Decoding(thinking=True, thinking_budget=64)
    for dialect in ("vllm", "llamacpp", "openai"):
        run(
            client(srv.url, dialect=dialect, decoding=dec).chat(
                MSGS, response_format=json_schema_format(schema)
            )
        )
    vllm, llama, oai = srv.bodies
    assert all(b["chat_template_kwargs"] == {"enable_thinking": True} for b in srv.bodies)
    assert vllm["thinking_token_budget"] == 64 and "thinking_token_budget" not in llama | oai
    assert vllm["response_format"] == oai["response_format"] == json_schema_format(schema)
    assert llama["response_format"] == {"type": "json_object", "schema": schema}
    run(client(srv.url, structured=False).chat(MSGS, response_format=json_schema_format(schema)))
    assert "response_format" not in srv.bodies[-1]


def test_deepseek_switches_thinking_with_its_own_body_field():
    """DeepSeek reads `thinking: {type}` and has no chat template switch; the other dialects' servers render
    a Qwen3-style template, switched by chat_template_kwargs (unit: the request body)."""
    for on, kind in ((False, "disabled"), (True, "enabled")):
        c = LLMClient(ClientConfig("http://x/v1", "deepseek-v4-pro", dialect="deepseek"))
        _, extra = c.request(MSGS, Decoding(thinking=on, thinking_budget=64), None, 0)
        assert extra == {"thinking": {"type": kind}}  # no chat_template_kwargs, no budget field
    c = LLMClient(
        ClientConfig("http://x/v1", "m", dialect="vllm", extra_body={"chat_template_kwargs": {"a": 1}})
    )
    _, extra = c.request(MSGS, Decoding(thinking=False), None, 0)
    assert extra == {"chat_template_kwargs": {"a": 1, "enable_thinking": False}}
    _, extra = c.request(MSGS, Decoding(thinking=None), None, 0)
    assert extra == {"chat_template_kwargs": {"a": 1}}


def test_the_model_each_reply_names_is_recorded_per_call_and_in_the_cache(tmp_path):
    """A hosted alias answers with a dated model id: every Completion, cache entry and the role's stats
    keep it."""
    cache = LLMCache(tmp_path / "llm.sqlite")
    with StandinServer("deepseek-v4-pro", answers_as="deepseek-v4-pro-2026-05-01") as server:
        c = LLMClient(ClientConfig(server.base_url, "deepseek-v4-pro", dialect="deepseek"), cache=cache)
        first = run(c.chat(MSGS))
        again = run(c.chat(MSGS))
    assert first.model == again.model == "deepseek-v4-pro-2026-05-01" and again.cached
    assert c.stats()["server"]["answered_as"] == {"deepseek-v4-pro-2026-05-01": 2}
    body, extra = c.request(MSGS, c.cfg.decoding, None, 0)
    assert cache.get(c.key(body, extra, "", 0))["model"] == "deepseek-v4-pro-2026-05-01"


def test_reasoning_is_separated_from_the_answer(api):
    answers = [
        reply("42", reasoning_content="think hard"),
        reply("<think>\nhmm\n</think>\n\n42"),
        reply("42", reasoning="r"),
    ]
    srv = api(lambda n, b: (200, answers[n], 0, {}))
    c = client(srv.url)
    outs = [run(c.chat([{"role": "user", "content": str(i)}])) for i in range(3)]
    assert [(o.text, o.reasoning) for o in outs] == [("42", "think hard"), ("42", "hmm"), ("42", "r")]


def test_thinking_without_a_final_answer_is_output_not_an_error(api):
    """Stopped while thinking: the caller (gate, judge) judges it; a reply with nothing at all fails."""
    answers = [
        reply("<think>still going", finish="length"),
        reply(None, reasoning="r", finish="length"),
        reply(""),
    ]
    srv = api(lambda n, b: (200, answers[n], 0, {}))
    c = client(srv.url, max_retries=0)
    unclosed, parsed, empty = (run(c.chat([{"role": "user", "content": str(i)}])) for i in range(3))
    assert unclosed.ok and (unclosed.text, unclosed.reasoning) == ("", "still going")
    assert parsed.ok and (parsed.text, parsed.reasoning) == ("", "r")
    assert not empty.ok and empty.error == "empty completion (finish_reason=stop)"
    # the format gate reads the output as written: an unclosed block stays unclosed
    assert unclosed.generated == "<think>\nstill going" and parsed.generated == "<think>\nr"
    assert Completion("[]", reasoning="r").generated == "<think>\nr\n</think>\n\n[]"
    assert Completion("[]").generated == "[]"


def test_a_cache_entry_with_raw_thinking_is_split_on_the_hit(api, tmp_path):
    """Entries written before the split lived in Completion hold the <think> block in the text."""
    srv = api(lambda n, b: (200, reply("fresh"), 0, {}))
    cache = LLMCache(tmp_path / "llm.sqlite")
    c = client(srv.url, cache=cache)
    body, extra = c.request(MSGS, c.cfg.decoding, None, 0)
    old = {"text": "<think>old thoughts</think>\n\nold answer", "reasoning": None, "finish_reason": "stop"}
    cache.put(c.key(body, extra, "v1", 0), old, "m")
    hit = run(c.chat(MSGS, prompt_version="v1"))
    assert hit.cached and (hit.text, hit.reasoning) == ("old answer", "old thoughts") and not srv.bodies


def test_cache_hit_skips_the_server_and_samples_are_distinct(api, tmp_path):
    srv = api(lambda n, b: (200, reply(f"answer {n}"), 0, {}))
    cache = LLMCache(tmp_path / "llm.sqlite")
    c = client(srv.url, cache=cache, decoding=Decoding(seed=10))
    first = run(c.chat(MSGS, prompt_version="v1"))
    again = run(c.chat(MSGS, prompt_version="v1"))
    assert again.cached and again.text == first.text == "answer 0" and len(srv.bodies) == 1
    assert again.attempts == 0 and again.prompt_tokens == first.prompt_tokens
    second_sample = run(c.chat(MSGS, prompt_version="v1", sample=1))
    assert not second_sample.cached and second_sample.text == "answer 1" and srv.bodies[1]["seed"] == 11
    assert cache.stats() == {"hits": 1, "misses": 2, "writes": 2}


def test_failures_are_not_cached(api, tmp_path):
    srv = api(lambda n, b: (503, {"error": "down"}, 0, {}) if n < 2 else (200, reply("up"), 0, {}))
    cache = LLMCache(tmp_path / "llm.sqlite")
    failed = run(client(srv.url, cache=cache, max_retries=1).chat(MSGS))
    assert not failed.ok and len(cache) == 0
    later = run(client(srv.url, cache=cache, max_retries=1).chat(MSGS))
    assert later.ok and not later.cached and later.text == "up" and len(cache) == 1


def test_api_key_comes_from_the_named_env_var_only(api, monkeypatch):
    srv = api(lambda n, b: (200, reply(), 0, {}))
    monkeypatch.delenv("LAZYMEM_TEST_KEY", raising=False)
    with pytest.raises(MissingApiKey, match="LAZYMEM_TEST_KEY"):
        client(srv.url, api_key_env="LAZYMEM_TEST_KEY")
    monkeypatch.setenv("LAZYMEM_TEST_KEY", "sk-secret-123456")
    c = client(srv.url, api_key_env="LAZYMEM_TEST_KEY")
    assert run(c.chat(MSGS)).ok
    assert srv.headers[0]["authorization"] == "Bearer sk-secret-123456"
    assert "sk-secret" not in json.dumps(asdict(c.cfg)) and "sk-secret" not in repr(c.cfg)
    local = client(srv.url)
    run(local.chat(MSGS))
    assert srv.headers[1]["authorization"] == "Bearer EMPTY"


def test_client_survives_a_new_event_loop(api):
    srv = api(lambda n, b: (200, reply(f"r{n}"), 0, {}))
    c = client(srv.url)
    assert run(c.chat(MSGS)).text == "r0"
    assert run(c.chat([{"role": "user", "content": "again"}])).text == "r1"


SCHEMA = json_schema_format({"type": "array", "items": {"type": "string"}, "minItems": 1})


def test_dialects_send_the_response_formats_their_provider_accepts():
    assert get_dialect("openai").response_format(SCHEMA) == SCHEMA
    assert get_dialect("deepseek").response_format(SCHEMA) == {"type": "json_object"}  # no json_schema
    assert get_dialect("llamacpp").response_format(SCHEMA)["schema"] == SCHEMA["json_schema"]["schema"]
    assert get_dialect("deepseek").formats == ("text", "json_object")


@pytest.mark.parametrize("dialect", ["openai", "deepseek"])
def test_a_provider_that_refuses_json_schema_stops_at_the_first_call(dialect):
    """A DeepSeek-like endpoint answers json_schema with HTTP 400: with a dialect that sends it, the first
    call raises (no retries, nothing counted as an answer); with the deepseek dialect the call succeeds."""
    with StandinServer("deepseek-v4-flash", formats=("text", "json_object")) as server:
        client = LLMClient(ClientConfig(server.base_url, "deepseek-v4-flash", dialect=dialect, max_retries=3))
        messages = [{"role": "user", "content": "Reply in JSON."}]
        if dialect == "openai":
            refused = "refused response_format 'json_schema'.*dialect: deepseek"
            with pytest.raises(ProviderRefused, match=refused):
                asyncio.run(client.chat(messages, response_format=SCHEMA))
            assert client.counts["retries"] == 0
        else:
            done = asyncio.run(client.chat(messages, response_format=SCHEMA))
            assert done.ok and json.loads(done.text) == {"memory": []}


LONG = [{"role": "user", "content": "word " * 300}]  # about 300 tokens


@pytest.mark.parametrize("policy", ["clamp", "error"])
def test_a_request_longer_than_the_context_is_clamped_or_a_named_error(policy):
    with StandinServer("m") as server:
        cfg = ClientConfig(server.base_url, "m", context_tokens=400, context_policy=policy)
        client = LLMClient(cfg)
        body, _ = client.request(LONG, Decoding(max_tokens=200), None, 0)
        found = client.fit_context(body)
        if policy == "clamp":
            assert found is None and 32 <= body["max_tokens"] < 100  # what the context leaves
        else:
            assert found.startswith("context exceeded: a prompt of about") and body["max_tokens"] == 200
            done = asyncio.run(client.chat(LONG, max_tokens=200))  # no call is made
            assert done.error == found and done.attempts == 0 and client.counts["errors"] == 1
        # a prompt that leaves almost nothing is an error under either policy; one that fits is untouched
        tight = LLMClient(ClientConfig(server.base_url, "m", context_tokens=340, context_policy=policy))
        assert tight.fit_context(tight.request(LONG, Decoding(max_tokens=200), None, 0)[0])
        roomy = LLMClient(ClientConfig(server.base_url, "m", context_tokens=4096, context_policy=policy))
        body, _ = roomy.request(LONG, Decoding(max_tokens=200), None, 0)
        assert roomy.fit_context(body) is None and body["max_tokens"] == 200
    with pytest.raises(ValueError, match="context_policy = 'cut'"):
        ClientConfig("http://x", "m", context_policy="cut")
