"""An in-process, OpenAI-compatible stand-in for every LLM role, for tests of plumbing, not of models.

`llm=standin` (tests/fixtures/conf/llm/standin.yaml, on Hydra's search path through `standin_env` or
`STANDIN_OVERRIDES`) serves every role of the CPU set from a tiny HTTP server in a thread of the process
that runs the job: no model, no GGUF, no llama.cpp, replies in milliseconds. Each reply has the shape
its role's prompt asks for, so the code downstream (format gate, memory blocks, judge labels, tables)
runs as it does with a real model:

- memory / teacher: one KEEP/DROP object per window message, KEEP when the message shares a content
  word with the question (its text verbatim), DROP otherwise;
- judge: LongMemEval's yes/no or LoCoMo's CORRECT/WRONG, correct when the reference occurs in the reply;
- NanoMemory: the session lines that share a content word with the question, or its "nothing" marker;
- any other request under a JSON schema: the smallest instance of the schema (e.g. reward-judge scores);
- Mem0's additive extraction (`json_object`): one memory per new message, its text verbatim;
- anything else (answers, reasoning chains): the request's own last message, so an answer holds exactly
  what its memory block held and the judge can find the reference in it.

`deepseek=True` answers as DeepSeek-V4's API does (the paper's judge and teacher): it thinks unless the body
says `thinking: {type: disabled}` (chat_template_kwargs mean nothing to it), its `max_tokens` caps the
reasoning and the answer together, and `json_blanks` replies under `response_format` json_object come back
as whitespace, as its JSON mode may (api-docs.deepseek.com/guides/thinking_mode and /guides/json_mode).

Real models are covered by the golden-path tests (docs/development.md lists them).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from lazymem.llm.backends import Backend

TESTS = Path(__file__).resolve().parent
# config groups the tests add to Hydra's search path (llm=standin)
FIXTURE_CONF = TESTS / "fixtures" / "conf"
STANDIN_OVERRIDES = ("llm=standin",)
# for compose() in the test process (a subprocess gets the same through standin_env)
STANDIN_SEARCHPATH = f"hydra.searchpath=[file://{FIXTURE_CONF}]"
WORD = re.compile(r"[a-z0-9]{4,}")
STOP = {"what", "when", "where", "which", "with", "that", "this", "have", "from", "your", "about", "does"}


def standin_env(env: dict | None = None) -> dict:
    """Environment for a `python -m lazymem.run` subprocess that composes `llm=standin`: this folder on
    PYTHONPATH (the backend module) and tests/fixtures/conf on Hydra's search path (the config)."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS), env.get("PYTHONPATH")) if p)
    env["LAZYMEM_CONFIG_PATH"] = f"file://{FIXTURE_CONF}"
    return env


def words(text: str) -> set[str]:
    return {w for w in WORD.findall(text.lower()) if w not in STOP}


def _field(pattern: str, text: str) -> str | None:
    found = re.search(pattern, text, re.MULTILINE)
    return found.group(1).strip() if found else None


def decisions(prompt: str, n: int) -> str:
    """The memory role's array: KEEP (verbatim) where a window message shares a word with the question."""
    question = words(_field(r"^Question: (.*)$", prompt) or "")
    lines = dict(re.findall(r"^(\d+)\. \[[^\]]*\] [^:]*: (.*)$", prompt, re.MULTILINE))
    items = []
    for k in range(1, n + 1):
        text = lines.get(str(k), "")
        keep = bool(text.strip()) and bool(question & words(text))
        items.append(
            {"op": "KEEP", "compressed_content": text, "reason": "shares a word with the question"}
            if keep
            else {"op": "DROP", "compressed_content": "", "reason": "unrelated"}
        )
    return json.dumps(items)


def instance(schema: dict[str, Any]) -> Any:
    """The smallest value a JSON schema accepts (enough for the reward judge's and similar replies)."""
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return instance(schema[key][0])
    kind = schema.get("type", "object")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        props = schema.get("properties", {})
        return {k: instance(props.get(k, {})) for k in schema.get("required", props)}
    if kind == "array":
        return [instance(schema.get("items", {})) for _ in range(schema.get("minItems", 0))]
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return "x" * schema.get("minLength", 1)


def respond(body: dict[str, Any]) -> str:
    prompt = body["messages"][-1]["content"]
    n = _field(r"Decide KEEP or DROP for each of the (\d+) messages", prompt)
    if n is not None:
        return decisions(prompt, int(n))
    reference = _field(r"^(?:Reference answer|Gold answer): (.*)$", prompt)
    graded = re.split(r"^(?:Reply to grade|Generated answer): ", prompt, maxsplit=1, flags=re.MULTILINE)
    if reference is not None and len(graded) == 2:
        right = reference.lower() in graded[1].lower()
        if "CORRECT or WRONG" in prompt:
            return "CORRECT" if right else "WRONG"
        return "yes" if right else "no"
    if "Copy out, word for word" in prompt:
        question = words(_field(r"^Question: (.*)$", prompt) or "")
        found = [line for line in prompt.splitlines() if line.startswith("[") and question & words(line)]
        marker = _field(r"reply with exactly: (.*)$", prompt) or "NONE"
        return "\n".join(found) or marker
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return json.dumps(instance(fmt["json_schema"]["schema"]))
    if fmt.get("type") == "json_object":
        new = (
            prompt.split("## New Messages", 1)[-1].split("\n## ", 1)[0] if "## New Messages" in prompt else ""
        )
        return json.dumps({"memory": [{"text": line.strip()} for line in new.splitlines() if line.strip()]})
    return prompt


# what the DeepSeek stand-in thinks before it answers: 24 words, so a 10-token judge never gets an answer
REASONING = (
    "The reply has to be read against the reference before I answer, so let me go through the question, "
    "the reference and the reply once more."
)


def deepseek_turn(body: dict[str, Any], answer: str) -> tuple[str, str | None, str]:
    """(content, reasoning_content, finish_reason) of DeepSeek-V4's API for `answer`: thinking unless the
    body disables it, then the answer, the two within `max_tokens` (a word counts as a token here)."""
    thinking = (body.get("thinking") or {}).get("type") != "disabled"
    reasoning = REASONING.split() if thinking else []
    budget = body.get("max_tokens") or len(reasoning) + len(answer.split()) + 1
    if len(reasoning) >= budget:
        return "", " ".join(reasoning[:budget]), "length"
    words, left = answer.split(), budget - len(reasoning)
    content, finish = (answer, "stop") if len(words) <= left else (" ".join(words[:left]), "length")
    return content, " ".join(reasoning) if thinking else None, finish


class StandinServer:
    """The OpenAI chat-completions route in a daemon thread of this process."""

    kind = "standin"

    def __init__(
        self,
        served_name: str,
        delay_s: float = 0.0,
        formats: tuple[str, ...] | None = None,
        deepseek: bool = False,
        json_blanks: int = 0,
        answers_as: str | None = None,
    ):
        self.served_name, self.delay_s = served_name, delay_s
        self.formats = formats  # response_format types it accepts (None: all); others get DeepSeek's 400
        self.deepseek = deepseek  # answer as DeepSeek-V4's API does (deepseek_turn)
        self.json_blanks = json_blanks  # this many json_object replies come back blank (deepseek only)
        self.answers_as = answers_as  # the `model` its replies name (None: the requested name)
        self.bodies: list[dict[str, Any]] = []  # every request body, in arrival order
        self.restarts, self.startup_s, self.http = 0, 0.0, None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_port}/v1"

    def start(self) -> StandinServer:
        delay_s, formats, server, lock = self.delay_s, self.formats, self, threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self._send({"object": "list", "data": [{"id": "standin", "object": "model"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                time.sleep(delay_s)
                kind = (body.get("response_format") or {}).get("type")
                if formats is not None and kind is not None and kind not in formats:
                    error = {
                        "message": "This response_format type is unavailable now",
                        "type": "invalid_request_error",
                    }
                    return self._send({"error": error}, status=400)
                with lock:
                    server.bodies.append(body)
                    blank = server.deepseek and kind == "json_object" and server.json_blanks > 0
                    server.json_blanks -= blank
                text, reasoning, finish = respond(body), None, "stop"
                if server.deepseek:
                    text, reasoning, finish = deepseek_turn(body, text)
                    text = " " * len(text) if blank else text
                message = {"role": "assistant", "content": text}
                if reasoning is not None:
                    message["reasoning_content"] = reasoning
                prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body["messages"])
                completion_tokens = max(1, len(text.split()) + len((reasoning or "").split()))
                self._send(
                    {
                        "id": "standin",
                        "object": "chat.completion",
                        "created": 0,
                        "model": server.answers_as or body["model"],
                        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                        "usage": {
                            "prompt_tokens": prompt_tokens,
                            "completion_tokens": completion_tokens,
                            "total_tokens": prompt_tokens + completion_tokens,
                        },
                    }
                )

            def _send(self, payload, status=200):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        return self

    def revive(self) -> None:
        pass

    def stop(self) -> None:
        if self.http is not None:
            self.http.shutdown()
            self.http.server_close()
            self.http = None

    def __enter__(self) -> StandinServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class StandinBackend(Backend):
    """Every role on one stand-in server, whatever model its config names (the name only keys the cache)."""

    name = "standin"

    def server_spec(self) -> list[Any]:
        return [self.name, self.options]

    def server(self, log_dir, model_cache_dir) -> StandinServer:
        return StandinServer(self.served_name, **self.options)

    def model_id(self) -> str:
        return f"standin@{self.model}"

    def problems(self, where, model_key=None) -> list[str]:
        return []
