"""One async client for every OpenAI-compatible chat API: llama.cpp, vLLM and hosted endpoints.

A call never raises for API or network trouble: after its retries it returns a :class:`Completion` with
``error`` set, so a run counts and shows failures instead of turning them into empty answers.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
import weakref
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

import openai

from lazymem import interrupt
from lazymem.llm.backends import Dialect, get_dialect
from lazymem.llm.cache import LLMCache, cache_key
from lazymem.llm.completion import Completion
from lazymem.llm.managed_server import ServerDied
from lazymem.tokens import chat_tokens

log = logging.getLogger(__name__)

_RETRY_STATUS = {408, 409, 425, 429}
CONTEXT_POLICIES = ("clamp", "error")
MIN_OUTPUT_TOKENS = 32  # a request left fewer output tokens than this fails before the call


# Requests in flight per endpoint, shared by every client of the process that calls it from the same event
# loop. `concurrency` bounds what one server is sent, not one client: the agent service gives each user an
# LLMSet of their own (their own response cache) over the one shared model server, and with a semaphore per
# client 32 users sent all their windows at once to a llama.cpp server that decodes one at a time; they queued
# there past timeout_s and failed.
_SLOTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, int], asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary()
)


def endpoint_slots(base_url: str, concurrency: int) -> asyncio.Semaphore:
    """The running loop's semaphore for `base_url` (one per concurrency setting)."""
    per_loop = _SLOTS.setdefault(asyncio.get_running_loop(), {})
    return per_loop.setdefault((base_url.rstrip("/"), concurrency), asyncio.Semaphore(concurrency))


class MissingApiKey(RuntimeError):
    """The environment variable named by ``api_key_env`` is not set."""


class ProviderRefused(RuntimeError):
    """The provider rejected a request for a capability it lacks (a ``response_format`` type): every call
    would fail the same way, so the run stops at the first instead of failing each item in silence."""


class MalformedResponse(ValueError):
    """The server answered 2xx but not with a usable chat completion."""


@dataclass(frozen=True)
class Decoding:
    temperature: float | None = 0.0
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None  # sample i is sent with seed + i, so samples differ but replay exactly
    thinking: bool | None = None  # on/off in the dialect's words (Dialect.thinking); None sends nothing
    thinking_budget: int | None = None  # cap on reasoning tokens, sent where the server supports one


@dataclass(frozen=True)
class ClientConfig:
    base_url: str
    served_name: str  # the `model` field of each request
    model_id: str = ""  # which weights answer (path, sha256, checkpoint): part of the cache key
    api_key_env: str | None = None  # env var holding the key; None for local servers (dummy key)
    dialect: str | Dialect = "openai"  # how response_format and the thinking budget are sent (backends.py)
    concurrency: int = 8  # requests in flight at once (the paper keeps up to 64 windows in flight)
    timeout_s: float = 120.0  # per attempt
    max_retries: int = 3  # retries after the first attempt
    backoff_base_s: float = 1.0  # first retry waits about this long, doubling after each failure
    backoff_cap_s: float = 30.0
    structured: bool = True  # False: response_format arguments are ignored (free-text decoding)
    # the server's context window in tokens (None: unknown, nothing checked), and what happens to a request
    # whose prompt plus max_tokens would not fit: clamp (max_tokens cut to what is left) or error (a named
    # error before any call); either way a prompt that leaves fewer than MIN_OUTPUT_TOKENS is an error
    context_tokens: int | None = None
    context_policy: str = "clamp"
    decoding: Decoding = field(default_factory=Decoding)
    extra_body: dict[str, Any] = field(default_factory=dict)  # sent verbatim with every request

    def __post_init__(self) -> None:
        object.__setattr__(self, "dialect", get_dialect(self.dialect))  # a name becomes its object
        if self.context_policy not in CONTEXT_POLICIES:
            raise ValueError(f"context_policy = {self.context_policy!r}: allowed values are clamp, error")


# Who is told of each chat call sent to a server (cache hits are not sent): None, or a function that takes the
# client's config and returns a context manager around the call (its retries included), entered as
# `with observe(cfg) as seen:` and given the call's Completion by `seen(done)`. The agent memory sets it while
# it traces an operation (lazymem/agent/telemetry.py); a context variable, it reaches the calls of that
# operation only, and costs one lookup per call when unset.
CHAT_OBSERVER: ContextVar[
    Callable[[ClientConfig], AbstractContextManager[Callable[[Completion], None]]] | None
] = ContextVar("lazymem_chat_observer", default=None)


def json_schema_format(schema: dict[str, Any], name: str = "output") -> dict[str, Any]:
    """An OpenAI ``response_format`` asking for JSON that follows ``schema``."""
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}


def _api_key(env_name: str | None) -> str:
    if not env_name:
        return "EMPTY"  # local servers accept any key
    key = os.environ.get(env_name)
    if not key:
        raise MissingApiKey(f"environment variable {env_name} (api_key_env) is not set or empty")
    return key


def _parse(resp: Any) -> tuple[str, str | None, str | None, int, int, str | None]:
    """(text, reasoning, finish_reason, prompt_tokens, completion_tokens, model) or MalformedResponse;
    model is the id the server says answered (a hosted alias resolves to a dated model over time)."""
    try:
        choice = resp.choices[0]
        msg = choice.message
        content = msg.content
        extra = getattr(msg, "model_extra", None) or {}
        reasoning = extra.get("reasoning") or extra.get("reasoning_content")
        usage = getattr(resp, "usage", None)
        pt = int(getattr(usage, "prompt_tokens", 0) or 0)
        ct = int(getattr(usage, "completion_tokens", 0) or 0)
        finish = choice.finish_reason
        model = getattr(resp, "model", None)
    except (AttributeError, TypeError, IndexError, KeyError, ValueError) as e:
        raise MalformedResponse(f"malformed response ({type(e).__name__}): {str(resp)[:300]!r}") from e
    if content is not None and not isinstance(content, str):
        raise MalformedResponse(f"message content is {type(content).__name__}, not text")
    return content or "", reasoning, finish, pt, ct, model if isinstance(model, str) else None


def _classify(e: BaseException, timeout_s: float) -> tuple[str, bool, float | None]:
    """(message, retryable, retry_after_s) for a failed attempt."""
    if isinstance(e, (TimeoutError, openai.APITimeoutError)):
        return f"timeout after {timeout_s:g}s", True, None
    if isinstance(e, openai.APIConnectionError):
        return f"connection error: {e}", True, None
    if isinstance(e, openai.APIStatusError):
        retry_after = None
        try:
            retry_after = float(e.response.headers.get("retry-after", ""))
        except (TypeError, ValueError):
            pass
        body = (e.response.text or "")[:300] if e.response is not None else ""
        retryable = e.status_code in _RETRY_STATUS or e.status_code >= 500
        return f"HTTP {e.status_code}: {body}", retryable, retry_after
    if isinstance(e, (MalformedResponse, openai.APIResponseValidationError, ValueError)):
        return f"malformed response: {e}"[:400], True, None
    return f"{type(e).__name__}: {e}"[:400], False, None


class LLMClient:
    """Bounded-concurrency chat calls with timeout, retries, usage accounting and an optional cache."""

    def __init__(self, cfg: ClientConfig, cache: LLMCache | None = None, server=None):
        self.cfg = cfg
        self.cache = cache
        self.server = server  # a managed server to restart when it stops answering (see _revive)
        self._api_key = _api_key(cfg.api_key_env)  # read now: a missing key fails before any work
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: openai.AsyncOpenAI | None = None
        self._sem: asyncio.Semaphore | None = None
        self.counts = {"calls": 0, "errors": 0, "retries": 0, "cache_hits": 0}
        self.tokens = {"prompt": 0, "completion": 0}
        self.answered_as: Counter[str] = Counter()  # the model ids the server answered with, per call

    def _bind(self) -> tuple[openai.AsyncOpenAI, asyncio.Semaphore]:
        """Client and endpoint semaphore for the running loop (fresh ones when a new asyncio.run starts)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._client is None or self._sem is None:
            self._client = openai.AsyncOpenAI(
                base_url=self.cfg.base_url, api_key=self._api_key, timeout=self.cfg.timeout_s, max_retries=0
            )
            self._sem = endpoint_slots(self.cfg.base_url, self.cfg.concurrency)
            self._loop = loop
        return self._client, self._sem

    def request(
        self, messages: list[dict[str, Any]], decoding: Decoding, response_format: dict | None, sample: int
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The (body, extra_body) sent for one call."""
        body: dict[str, Any] = {"model": self.cfg.served_name, "messages": messages}
        for name in ("temperature", "top_p", "max_tokens"):
            if getattr(decoding, name) is not None:
                body[name] = getattr(decoding, name)
        if decoding.seed is not None:
            body["seed"] = decoding.seed + sample
        if response_format is not None and self.cfg.structured:
            body["response_format"] = self.cfg.dialect.response_format(response_format)
        extra = dict(self.cfg.extra_body)
        if decoding.thinking is not None:
            for name, value in self.cfg.dialect.thinking(decoding.thinking).items():
                extra[name] = {**extra.get(name, {}), **value}
        if decoding.thinking_budget is not None:
            extra.update(self.cfg.dialect.thinking_budget(decoding.thinking_budget))
        return body, extra

    def key(self, body: dict[str, Any], extra: dict[str, Any], prompt_version: str, sample: int) -> str:
        model = {"served_name": self.cfg.served_name, "model_id": self.cfg.model_id}
        return cache_key(
            {
                "model": model,
                "body": body,
                "extra_body": extra,
                "prompt_version": prompt_version,
                "sample": sample,
            }
        )

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        prompt_version: str = "",
        response_format: dict[str, Any] | None = None,
        sample: int = 0,
        **decoding: Any,
    ) -> Completion:
        """One chat completion. ``decoding`` overrides fields of the configured :class:`Decoding`."""
        dec = replace(self.cfg.decoding, **decoding)
        body, extra = self.request(messages, dec, response_format, sample)
        self.counts["calls"] += 1
        too_long = self.fit_context(body)
        if too_long:
            self.counts["errors"] += 1
            return Completion("", None, None, 0, 0, 0.0, 0, error=too_long)
        key = self.key(body, extra, prompt_version, sample)
        if self.cache is not None:
            hit = await asyncio.to_thread(self.cache.get, key)
            if hit is not None:
                self.counts["cache_hits"] += 1
                done = Completion(**{**hit, "attempts": 0, "cached": True, "error": None})
                self.answered_as[done.model or "(unknown)"] += 1
                return done
        observe = CHAT_OBSERVER.get()
        if observe is None:
            done = await self._call(body, extra)
        else:
            with observe(self.cfg) as seen:
                done = await self._call(body, extra)
                seen(done)
        if done.ok:
            self.answered_as[done.model or "(unknown)"] += 1
            self.tokens["prompt"] += done.prompt_tokens
            self.tokens["completion"] += done.completion_tokens
            if self.cache is not None:
                value = {k: v for k, v in done.to_dict().items() if k not in ("attempts", "cached", "error")}
                await asyncio.to_thread(self.cache.put, key, value, self.cfg.served_name)
        else:
            self.counts["errors"] += 1
        return done

    async def _call(self, body: dict[str, Any], extra: dict[str, Any]) -> Completion:
        client, sem = self._bind()
        cfg = self.cfg
        start: float | None = None
        error = "not attempted"
        for attempt in range(1, cfg.max_retries + 2):
            async with sem:  # the slot is held only while a request is on the wire, not while backing off
                start = time.monotonic() if start is None else start
                try:
                    async with asyncio.timeout(cfg.timeout_s):
                        resp = await client.chat.completions.create(**body, extra_body=extra or None)
                    *parsed, model = _parse(resp)
                    done = Completion(*parsed, time.monotonic() - start, attempt, model=model)
                except asyncio.CancelledError:
                    raise
                except openai.BadRequestError as e:
                    self._refused(body, e)
                    error, retryable, retry_after = _classify(e, cfg.timeout_s)
                except (openai.OpenAIError, TimeoutError, ValueError) as e:
                    error, retryable, retry_after = _classify(e, cfg.timeout_s)
                else:
                    # Thinking without a final answer is the model's output (the caller judges it);
                    # nothing at all is a failed call.
                    if done.text.strip() or done.reasoning:
                        return done
                    # Deterministic decoding would give the same empty answer again: no retry.
                    error, retryable = f"empty completion (finish_reason={done.finish_reason})", False
            interrupt.check()  # never retry after SIGINT/SIGTERM: the servers are already down
            if retryable and error.startswith("connection error"):
                error, retryable = self._revive(error)
            if not retryable or attempt > cfg.max_retries:
                return Completion("", None, None, 0, 0, time.monotonic() - start, attempt, error=error)
            self.counts["retries"] += 1
            delay = self.backoff(attempt, retry_after)
            log.warning(
                "%s attempt %d failed (%s); retrying in %.2fs", cfg.served_name, attempt, error, delay
            )
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    def fit_context(self, body: dict[str, Any]) -> str | None:
        """Apply the context policy to a request body (clamp may lower its max_tokens); the error of a
        request that cannot fit, or None."""
        ctx = self.cfg.context_tokens
        if not ctx:
            return None
        used = chat_tokens(body["messages"])
        wanted = body.get("max_tokens") or MIN_OUTPUT_TOKENS
        left = ctx - used
        if used + wanted <= ctx:
            return None
        problem = (
            f"context exceeded: a prompt of about {used} tokens plus max_tokens {wanted} does not fit "
            f"{self.cfg.served_name}'s {ctx}-token context"
        )
        if self.cfg.context_policy == "error" or left < MIN_OUTPUT_TOKENS:
            return problem
        body["max_tokens"] = left
        return None

    def _refused(self, body: dict[str, Any], e: openai.BadRequestError) -> None:
        """Raise ProviderRefused when an HTTP 400 names the response_format this request sent."""
        text = e.response.text if e.response is not None else str(e)
        if "response_format" not in body or "response_format" not in (text or ""):
            return
        cfg = self.cfg
        raise ProviderRefused(
            f"{cfg.served_name} at {cfg.base_url} refused response_format "
            f"{body['response_format'].get('type')!r} (HTTP 400: {(text or '')[:200]}). The role's dialect "
            f"{cfg.dialect.name!r} sends {', '.join(cfg.dialect.formats)}: set the role's dialect to one its "
            "provider accepts (dialect: deepseek for DeepSeek's API, which takes text and json_object only), "
            "or structured: false"
        ) from None

    def _revive(self, error: str) -> tuple[str, bool]:
        """A connection error may mean the managed server died: restart it (in this thread, so it keeps
        the parent-death signal) and retry; a server that may not be restarted again ends the retries."""
        if self.server is None:
            return error, True
        try:
            self.server.revive()
        except ServerDied as e:
            return f"{error}; {e}", False
        return error, True

    def backoff(self, attempt: int, retry_after: float | None = None) -> float:
        """Exponential backoff with jitter: uniform in [d/2, d], d = min(cap, base * 2**(attempt-1))."""
        d = min(self.cfg.backoff_cap_s, self.cfg.backoff_base_s * 2 ** (attempt - 1))
        if retry_after is not None:
            d = max(d, min(retry_after, self.cfg.backoff_cap_s))
        return d / 2 + random.random() * d / 2

    def stats(self) -> dict[str, Any]:
        return {
            **self.counts,
            "prompt_tokens": self.tokens["prompt"],
            "completion_tokens": self.tokens["completion"],
            "server": self.served_by(),
        }

    def served_by(self) -> dict[str, Any]:
        """Which server answered this role: its kind (vllm, llamacpp, endpoint, ...), address, name,
        weights and the model ids its replies named with their counts, for the run's records (a URL's
        user:password part is left out)."""
        url = urlsplit(self.cfg.base_url)
        return {
            "kind": getattr(self.server, "kind", "endpoint"),
            "base_url": url._replace(netloc=url.netloc.rpartition("@")[2]).geturl(),
            "served_name": self.cfg.served_name,
            "model_id": self.cfg.model_id,
            "dialect": self.cfg.dialect.name,
            "answered_as": dict(self.answered_as),
        }

    def close(self) -> None:
        """Close the HTTP client on the event loop it was opened on: scheduled there while that loop runs
        (the agent service's), run to the end on a stopped one; a closed loop took its connections along."""
        client, loop, self._client = self._client, self._loop, None
        if client is None or loop is None or loop.is_closed():
            return
        if loop.is_running():
            asyncio.run_coroutine_threadsafe(client.close(), loop)
        else:
            loop.run_until_complete(client.close())
