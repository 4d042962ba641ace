"""A toy LLM backend defined outside lazymem: its own request dialect and its own (in-process) server.

The server is a tiny OpenAI-compatible HTTP server in a thread. With a fixed `reply` it answers every
request with it; without one it plays both roles of an evaluation: a judge prompt (it contains
"Response to grade:") gets CORRECT when the reference is in the response, anything else gets the
request's own text back (so an answer "knows" exactly what its memory block held).
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from lazymem.llm.backends import Backend, Dialect

BODIES: list[dict] = []  # every request body the toy servers of this process received


@dataclass(frozen=True)
class ToyDialect(Dialect):
    name: str = "toy"

    def response_format(self, fmt):
        return {"type": "toy_grammar", "grammar": fmt["json_schema"]["schema"]}

    def thinking_budget(self, tokens):
        return {"toy_think_tokens": tokens}


def respond(body: dict, reply: str | None) -> str:
    if reply is not None:
        return reply
    text = body["messages"][-1]["content"]
    pattern = r"Reference answer: ([^\n]*)\n.*Response to grade: (.*)\nReply CORRECT"
    graded = re.search(pattern, text, re.DOTALL)
    if graded:
        reference, response = graded.group(1).strip(), graded.group(2)
        return "CORRECT" if reference.lower() in response.lower() else "WRONG"
    return text


class ToyServer:
    kind = "toy"

    def __init__(self, served_name: str, reply: str | None = None):
        self.served_name, self.reply, self.restarts, self.http = served_name, reply, 0, None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_port}/v1"

    def start(self) -> ToyServer:
        reply = self.reply

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                BODIES.append(body)
                message = {"role": "assistant", "content": respond(body, reply)}
                data = json.dumps(
                    {
                        "id": "toy",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body["model"],
                        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    }
                ).encode()
                self.send_response(200)
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


class ToyBackend(Backend):
    name = "toy"
    dialect = ToyDialect()

    def server(self, log_dir, model_cache_dir):
        return ToyServer(self.served_name, **self.options)

    def model_id(self) -> str:
        return "toy-weights@" + self.model

    def problems(self, where, model_key=None) -> list[str]:
        ok = self.model.startswith("toy:")
        return [] if ok else [f"{where}.model = {self.model!r}: a toy model is named toy:NAME"]
