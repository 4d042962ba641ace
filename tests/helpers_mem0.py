"""Mem0 without a model: a history, a perfect extractor for Mem0's prompt, a bag-of-words encoder, a store
spec; and an environment whose processes cannot reach beyond loopback (every attempt logged)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from lazymem.data.schema import History, Message
from lazymem.llm.client import Decoding
from lazymem.llm.completion import Completion
from lazymem.methods.mem0_store import StoreSpec, open_store

from helpers import ROOT


def history(speakers=("user", "assistant"), sessions=2, per_session=3, hid="h1") -> History:
    msgs, k = [], 0
    for s in range(sessions):
        for i in range(per_session):
            role = speakers[i % len(speakers)]
            date = f"2023/05/0{s + 1} (Mon) 10:00"
            msgs.append(Message(k, f"s{s}", date, role, f"fact {k}: {role} likes item {k}"))
            k += 1
    return History(hid, msgs)


class FakeLLM:
    """Answers Mem0's extraction prompt with one memory per new message, like a perfect extractor."""

    def __init__(self, fail_on_call: int | None = None):
        self.cfg = SimpleNamespace(
            served_name="fake", model_id="fake-1", structured=True, decoding=Decoding()
        )
        self.calls, self.fail_on_call = 0, fail_on_call

    async def chat(self, messages, response_format=None, **decoding):
        self.calls += 1
        if self.calls == self.fail_on_call:
            return Completion("", error="HTTP 500: boom")
        new = messages[1]["content"].split("## New Messages", 1)[1].split("##", 1)[0]
        facts = re.findall(r"fact \d+: [^\n\"]+", new)
        body = {"memory": [{"id": str(i), "text": f.strip()} for i, f in enumerate(facts)]}
        return Completion(json.dumps(body), prompt_tokens=100, completion_tokens=20, latency_s=0.5)


class FakeDense:
    """Bag-of-words hashing vectors: texts sharing words are close."""

    query_template = "{query}"

    def __init__(self):
        self.encoder = SimpleNamespace(identity="fake-encoder|dim=64", encode=self.encode)

    def encode(self, texts):
        out = np.zeros((len(texts), 64), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % 64] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)

    def embed_query(self, text):
        return self.encode([text])[0]


def spec(tmp_path, batch_size=2) -> StoreSpec:
    return StoreSpec(tmp_path / "stores", None, batch_size, None)


def build(h, sp, llm):
    async def go():
        store, built = await open_store(h, sp, llm, FakeDense())
        memories = await asyncio.to_thread(store.all_memories)
        store.close()
        return store, built, memories

    return asyncio.run(go())


GUARD = textwrap.dedent(
    """
    # sitecustomize: every outbound connection that is not loopback is refused and logged
    import ipaddress, os, socket
    _connect = socket.socket.connect
    def _guarded(self, address):
        host = address[0] if isinstance(address, tuple) else None
        if host is not None:
            try:
                local = ipaddress.ip_address(host).is_loopback
            except ValueError:
                local = host == "localhost"
            if not local:
                with open(os.environ["NETWORK_LOG"], "a") as f:
                    f.write(f"{host}\\n")
                raise OSError("network disabled for this test")
        return _connect(self, address)
    socket.socket.connect = _guarded
    """
)


def guarded_env(tmp_path: Path) -> dict:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(GUARD)

    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]),
        "NETWORK_LOG": str(tmp_path / "network.log"),
        "MEM0_TELEMETRY": "True",  # the method must turn it off itself
        "HOME": str(tmp_path / "home"),
    }
