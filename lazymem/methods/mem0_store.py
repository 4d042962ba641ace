"""Mem0's write-time store of one history, built once through the released `mem0ai` package.

Ingestion follows Mem0's own LoCoMo harness (mem0ai/mem0, evaluation/src/memzero/add.py): sessions in
order; every speaker of a multi-speaker conversation owns a Mem0 user id and receives the whole session
from their side (their own turns as `user`, the others' as `assistant`, each content `Speaker: text`);
each add is `batch_size` consecutive messages (the harness: 2) with `metadata={"timestamp": session
date}`. A user/assistant history (LongMemEval, synthetic; Mem0 ships no harness for it) has one owner,
`user`, and keeps its roles. We add the batch's message indices to the metadata (`messages`), which Mem0
stores but never shows its LLM, so a retrieved memory names the messages it came from.

Mem0 runs with our parts: its LLM calls go through a lazymem role (`RoleLLM`: our client, with its cache,
retries and accounting), its embedder is the job's dense encoder (`DenseEmbedder`) and its vector store
is Qdrant, embedded on disk unless a URL is given. Telemetry is off and nothing is fetched.

A store lives in `store_dir/<history>-<key>/` with `ledger.json`, written last: the key it was built
under and what building it cost. It is built in a `.building-*` folder and renamed into place only when
complete, so a killed ingestion never leaves a folder that looks finished; a folder whose ledger does not
match the expected key is rebuilt.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from lazymem import interrupt
from lazymem.data.schema import History

INGEST_VERSION = 1  # bump when the way a history is fed to Mem0 changes (invalidates every store)
LEDGER = "ledger.json"
COLLECTION = "memories"
ROLES = {"user", "assistant"}


def import_mem0(home: Path):
    """The `mem0` package with telemetry off and its home folder (config.json) under `home`.

    Mem0 reads MEM0_TELEMETRY and MEM0_DIR when first imported; the flags are also forced off on the
    modules in case another import came first.
    """
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ.setdefault("MEM0_DIR", str(home))
    home.mkdir(parents=True, exist_ok=True)
    try:
        import mem0.memory.main as main
        import mem0.memory.telemetry as telemetry
    except ImportError as e:
        raise ImportError("method mem0 needs the mem0 extra: pip install 'lazymem[mem0]'") from e
    telemetry.MEM0_TELEMETRY = False
    main.MEM0_TELEMETRY = False
    return main


def history_hash(history: History) -> str:
    body = [[m.idx, m.session_id, m.time, m.role, m.text] for m in history.messages]
    return hashlib.sha256(json.dumps(body, ensure_ascii=False).encode()).hexdigest()


def owners(history: History) -> list[str]:
    """Mem0 user ids: `user` for a user/assistant history, else each speaker in order of appearance."""
    speakers = list(dict.fromkeys(m.role for m in history.messages))
    return ["user"] if set(speakers) <= ROLES else speakers


@dataclass(frozen=True)
class Add:
    """One `Memory.add` call: whose memory, the messages as Mem0 reads them, and the metadata."""

    user_id: str
    messages: list[dict[str, str]]
    timestamp: str
    indices: list[int]


def plan(history: History, batch_size: int) -> list[Add]:
    """Every add of the history, in order (the harness's sequence, the two speakers one after the other)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    ids = owners(history)
    adds = []
    for sid in history.session_ids:
        session = history.session(sid)
        for uid in ids:
            if uid == "user" and len(ids) == 1:
                turns = [{"role": m.role, "content": m.text} for m in session]
            else:
                turns = [
                    {"role": "user" if m.role == uid else "assistant", "content": f"{m.role}: {m.text}"}
                    for m in session
                ]
            for k in range(0, len(session), batch_size):
                part = session[k : k + batch_size]
                adds.append(Add(uid, turns[k : k + batch_size], part[0].time, [m.idx for m in part]))
    return adds


@dataclass
class Usage:
    """The LLM work of one build (cache replays counted apart: their tokens are the original cost)."""

    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "seconds": round(self.seconds, 3)}


class CallFailed(RuntimeError):
    """One of Mem0's LLM calls failed after the client's retries (Mem0 wraps it in an error of its own)."""


def call_failure(error: BaseException) -> CallFailed | None:
    """The failed LLM call behind an error Mem0 raised, if one is (Mem0 chains it as the cause)."""
    seen: set[int] = set()
    node: BaseException | None = error
    while node is not None and id(node) not in seen:
        if isinstance(node, CallFailed):
            return node
        seen.add(id(node))
        node = node.__cause__ or node.__context__
    return None


class RoleLLM:
    """Mem0's LLM interface (`generate_response`) answered by a lazymem role: our client, with its cache,
    retries and accounting, on the job's event loop while Mem0 runs in a worker thread."""

    def __init__(self, client, loop: asyncio.AbstractEventLoop, decoding: dict, usage: Usage):
        self.client, self.loop, self.decoding, self.usage = client, loop, decoding, usage

    def generate_response(self, messages, response_format=None, tools=None, tool_choice="auto", **kwargs):
        if tools:
            raise NotImplementedError("Mem0 asked for tool calls, which its additive pipeline never does")
        call = self.client.chat(messages, response_format=response_format, **self.decoding)
        future = asyncio.run_coroutine_threadsafe(call, self.loop)
        while True:  # never outlive the job: a signal or a stopped loop ends the wait
            try:
                done = future.result(timeout=1.0)
                break
            except concurrent.futures.TimeoutError:
                interrupt.check()
                if not self.loop.is_running():
                    future.cancel()
                    raise RuntimeError("the job's event loop stopped during a Mem0 call") from None
        self.usage.calls += 1
        self.usage.cache_hits += done.cached
        self.usage.prompt_tokens += done.prompt_tokens
        self.usage.completion_tokens += done.completion_tokens
        self.usage.seconds += done.latency_s
        if done.error:
            raise CallFailed(f"Mem0's LLM call failed: {done.error}")
        return done.text


class DenseEmbedder:
    """Mem0's embedder interface (`embed`, `embed_batch`) on the job's dense retriever: what Mem0 embeds
    to search with gets the retriever's query template, what it stores is encoded as it is."""

    def __init__(self, dense):
        self.dense = dense
        self.dims = int(dense.embed_query("dimension probe").shape[0])

    def embed(self, text, memory_action=None):
        return self.embed_batch([text], memory_action)[0]

    def embed_batch(self, texts, memory_action="add"):
        if memory_action == "search":
            return [self.dense.embed_query(t).tolist() for t in texts]
        return self.dense.encoder.encode(list(texts)).tolist()


@dataclass
class StoreSpec:
    """Everything that changes a store, and where stores live."""

    store_dir: Path
    qdrant_url: str | None
    batch_size: int
    custom_instructions: str | None
    decoding: dict = field(default_factory=dict)

    def key(self, history: History, llm_cfg, dense) -> dict[str, Any]:
        from mem0.configs import prompts

        optional = {name: _installed(name) for name in ("spacy", "fastembed")}
        return {
            "ingest_version": INGEST_VERSION,
            "history": history_hash(history),
            "mem0ai": metadata.version("mem0ai"),
            "qdrant_client": metadata.version("qdrant-client"),
            # spaCy (lemmas, entities) and fastembed (BM25) change what Mem0 stores when present
            "optional_packages": optional,
            "llm": {"served_name": llm_cfg.served_name, "model_id": llm_cfg.model_id},
            "decoding": {**llm_cfg.decoding.__dict__, **self.decoding},
            "json_mode": llm_cfg.structured,  # whether Mem0's response_format reaches the server
            "embedder": {"identity": dense.encoder.identity, "query_template": dense.query_template},
            "prompt": hashlib.sha256(prompts.ADDITIVE_EXTRACTION_PROMPT.encode()).hexdigest()[:16],
            "custom_instructions": self.custom_instructions,
            "batch_size": self.batch_size,
            "vector_store": self.qdrant_url or "embedded",
        }


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _digest(key: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:60]


class Store:
    """An open, finished Mem0 store: `search` runs Mem0's own search for each owner."""

    def __init__(self, memory, path: Path, ledger: dict[str, Any]):
        self.memory, self.path, self.ledger = memory, path, ledger

    def search(self, query: str, top_k: int, threshold: float) -> dict[str, list[dict[str, Any]]]:
        found = {}
        for uid in self.ledger["owners"]:
            hits = self.memory.search(query, top_k=top_k, threshold=threshold, filters={"user_id": uid})
            found[uid] = hits["results"]
        return found

    def all_memories(self) -> list[tuple[str, str, str]]:
        """(owner, timestamp, text) of every stored memory, sorted: what two equal builds share."""
        out = []
        for uid in self.ledger["owners"]:
            for m in self.memory.get_all(filters={"user_id": uid}, top_k=100000)["results"]:
                out.append((uid, (m.get("metadata") or {}).get("timestamp", ""), m["memory"]))
        return sorted(out)

    def close(self) -> None:
        close_memory(self.memory)


def close_memory(memory) -> None:
    memory.close()
    memory.vector_store.client.close()  # releases the embedded Qdrant folder's lock


def open_memory(main, path: Path, spec: StoreSpec, collection: str, llm, embedder):
    """A mem0 `Memory` on the store at `path`, with our LLM and embedder in place of its own."""
    if spec.qdrant_url:
        key = os.environ.get("QDRANT_API_KEY")
        vector = {"url": spec.qdrant_url, "collection_name": collection, "api_key": key}
    else:
        vector = {"path": str(path / "qdrant"), "collection_name": collection}
    config = main.MemoryConfig(
        vector_store={"provider": "qdrant", "config": {**vector, "embedding_model_dims": embedder.dims}},
        # placeholders never called: the instance's llm and embedding_model are replaced below
        llm={"provider": "openai", "config": {"api_key": "unused", "openai_base_url": "http://127.0.0.1:9"}},
        embedder={
            "provider": "openai",
            "config": {"api_key": "unused", "openai_base_url": "http://127.0.0.1:9"},
        },
        history_db_path=str(path / "history.db"),
        custom_instructions=spec.custom_instructions,
    )
    memory = main.Memory(config)
    memory.llm, memory.embedding_model = llm, embedder
    return memory


def _drop_collection(memory) -> None:
    """Server mode: an unfinished or stale collection of this key is removed before a rebuild."""
    client = memory.vector_store.client
    for name in (memory.collection_name, memory.entity_store.collection_name):
        if client.collection_exists(name):
            client.delete_collection(name)


def _remove_dead_builds(root: Path) -> None:
    """Remove `.building-*` folders whose process is gone (killed ingestions, of any key)."""
    for folder in root.glob(".building-*"):
        try:
            pid = int(folder.name.rsplit("-", 2)[-2])
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except (ValueError, PermissionError):
            continue


async def open_store(history: History, spec: StoreSpec, client, dense) -> tuple[Store, bool]:
    """The finished store of `history` (built now if missing or incompatible) and whether it was built."""
    main = import_mem0(spec.store_dir / "mem0_home")
    key = spec.key(history, client.cfg, dense)
    digest = _digest(key)
    final = spec.store_dir / f"{_slug(history.id)}-{digest}"
    collection = f"lazymem_{digest}" if spec.qdrant_url else COLLECTION
    usage = Usage()
    loop = asyncio.get_running_loop()
    llm, embedder = RoleLLM(client, loop, spec.decoding, usage), DenseEmbedder(dense)

    ledger = _read_ledger(final)
    if ledger is not None and ledger.get("key") == key:
        memory = await asyncio.to_thread(open_memory, main, final, spec, collection, llm, embedder)
        return Store(memory, final, ledger), False
    shutil.rmtree(final, ignore_errors=True)  # absent, unfinished or built under another key

    spec.store_dir.mkdir(parents=True, exist_ok=True)
    _remove_dead_builds(spec.store_dir)
    tmp = spec.store_dir / f".building-{digest}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        ledger = await _ingest(main, history, spec, tmp, key, collection, llm, embedder, usage)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # a failed build leaves nothing; a killed one: see above
        raise
    try:
        tmp.rename(final)
    except OSError:  # another process finished the same store first: use theirs
        shutil.rmtree(tmp, ignore_errors=True)
        ledger = _read_ledger(final)
        if ledger is None or ledger.get("key") != key:
            raise
    memory = await asyncio.to_thread(open_memory, main, final, spec, collection, llm, embedder)
    return Store(memory, final, ledger), True


async def _ingest(main, history, spec, tmp, key, collection, llm, embedder, usage) -> dict[str, Any]:
    """Feed the whole history to a new Mem0 store in `tmp`; the ledger of what it took."""
    adds = plan(history, spec.batch_size)
    t0 = time.perf_counter()
    memory = await asyncio.to_thread(open_memory, main, tmp, spec, collection, llm, embedder)
    try:
        if spec.qdrant_url:
            await asyncio.to_thread(_drop_collection, memory)
            close_memory(memory)
            memory = await asyncio.to_thread(open_memory, main, tmp, spec, collection, llm, embedder)
        for add in adds:
            meta = {"timestamp": add.timestamp, "messages": add.indices}
            await asyncio.to_thread(memory.add, add.messages, user_id=add.user_id, metadata=meta)
        ledger = {
            "key": key,
            "history_id": history.id,
            "owners": owners(history),
            "messages": len(history.messages),
            "sessions": len(history.session_ids),
            "adds": len(adds),
            "embedding_dims": embedder.dims,
            "build_seconds": round(time.perf_counter() - t0, 3),
            "llm": usage.to_dict(),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        ledger["memories"] = len(Store(memory, tmp, ledger).all_memories())
    finally:
        close_memory(memory)
    (tmp / LEDGER).write_text(json.dumps(ledger, indent=1))
    return ledger


def _read_ledger(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads((path / LEDGER).read_text())
    except (OSError, ValueError):
        return None
