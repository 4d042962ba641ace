"""Mem0 (paper Table 1, App. D.4), run through the released `mem0ai` package: construct, then retrieve.

Write time: the first question over a history builds (or reopens) its Mem0 store (methods/mem0_store.py:
Mem0's LoCoMo harness for ingestion, our memory role as its LLM, the job's dense encoder as its embedder,
Qdrant as its vector store), once per history and configuration, reused across questions, methods, reruns
and `resume`. Query time: Mem0's own search, `top_k` memories per owner (each LoCoMo speaker is one, as
in Mem0's harness), shown to the answer model as `timestamp: memory` lines under their owner.

Timings: `retrieval` is Mem0's search; building the store is write-time work, outside every timer, and
reported in `detail["ingest"]` (the store's ledger: LLM calls, tokens, seconds; `built_now` on the
question that paid for it).
"""

from __future__ import annotations

import asyncio
import importlib.util
import time
from collections.abc import Mapping
from pathlib import Path

from lazymem.construct.processor import StageError
from lazymem.data.schema import History, Question
from lazymem.methods.base import Context, MemoryBlock
from lazymem.methods.mem0_store import Store, StoreSpec, call_failure, open_store
from lazymem.prompts import load


class Mem0:
    needs_retrieval = True  # its embedder is the job's dense retriever

    def __init__(
        self,
        store_dir: str,
        name: str = "mem0",
        role: str = "memory",
        retriever: str = "dense",
        top_k: int = 50,
        threshold: float = 0.1,
        batch_size: int = 2,
        custom_instructions: str | None = None,
        qdrant_url: str | None = None,
        decoding: Mapping | None = None,
    ):
        if importlib.util.find_spec("mem0") is None:  # fail before any server starts
            raise ImportError("method mem0 needs the mem0 extra: pip install 'lazymem[mem0]'")
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {threshold}")
        self.name, self.role, self.retriever = name, role, retriever
        self.roles = (role,)
        self.top_k, self.threshold = top_k, threshold
        instructions = load(custom_instructions).text.strip() if custom_instructions else None
        self.spec = StoreSpec(Path(store_dir), qdrant_url, batch_size, instructions, dict(decoding or {}))
        self._open: tuple[str, Store] | None = None  # one store open at a time (embedded Qdrant locks it)

    async def store(self, history: History, ctx: Context) -> tuple[Store, bool]:
        if self._open is not None and self._open[0] == history.id:
            return self._open[1], False
        if self._open is not None:
            self._open[1].close()
            self._open = None
        try:
            llm, dense = ctx.llms[self.role], ctx.dense(self.retriever)
            store, built = await open_store(history, self.spec, llm, dense)
        except Exception as e:
            failed = call_failure(e)
            if failed is None:
                raise
            # a named error of the question, as for every method whose LLM call fails (not a bug's trace)
            raise StageError(f"{self.name} ingestion stopped: {failed}") from e
        self._open = (history.id, store)
        return store, built

    async def build(self, question: Question, history: History, ctx: Context) -> MemoryBlock:
        store, built = await self.store(history, ctx)
        t0 = time.perf_counter()
        found = await asyncio.to_thread(store.search, question.text, self.top_k, self.threshold)
        retrieval_s = time.perf_counter() - t0
        sections, shown, hits = [], set(), []
        for uid, memories in found.items():
            lines = []
            for m in memories:
                meta = m.get("metadata") or {}
                lines.append(f"- {meta.get('timestamp', '')}: {m['memory']}")
                shown.update(meta.get("messages", []))
                hits.append([uid, m["id"], round(m["score"], 6)])
            if len(found) > 1:
                lines.insert(0, f"Memories of {uid}:")
            sections.append("\n".join(lines))
        text = "\n\n".join(s for s in sections if s.strip())
        ledger = store.ledger
        return MemoryBlock(
            text=text,
            style="compressed",
            shown=sorted(shown),
            timings={"retrieval": retrieval_s},
            detail={
                "memories": hits,
                "ingest": {
                    "store": store.path.name,
                    "built_now": built,
                    "messages": ledger["messages"],
                    "adds": ledger["adds"],
                    "memories": ledger["memories"],
                    "build_seconds": ledger["build_seconds"],
                    **{f"llm_{k}": v for k, v in ledger["llm"].items()},
                },
            },
        )
