"""Mem0 as a method (lazymem/methods/mem0.py): its settings, the memory block per speaker, a failed
ingestion call as a named stage error. The store underneath: test_mem0_store.py."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("mem0", reason="needs the mem0 extra: pip install 'lazymem[mem0]'")

from lazymem.construct.processor import StageError  # noqa: E402
from lazymem.data.schema import Question  # noqa: E402
from lazymem.methods.base import Context  # noqa: E402
from lazymem.methods.mem0 import Mem0  # noqa: E402

from helpers_mem0 import FakeDense, FakeLLM, history  # noqa: E402


def test_a_failed_llm_call_during_ingestion_is_a_named_stage_error(tmp_path):
    method = Mem0(store_dir=str(tmp_path / "stores"), top_k=3)
    ctx = Context(llms={"memory": FakeLLM(fail_on_call=2)})
    ctx.dense = lambda name="dense": FakeDense()
    q = Question("q1", "single-hop", "Which item?", "item 3", "h1")
    with pytest.raises(StageError, match=r"mem0 ingestion stopped: Mem0's LLM call failed: HTTP 500: boom"):
        asyncio.run(method.build(q, history(), ctx))
    assert not list((tmp_path / "stores").glob("h1-*"))  # nothing half-built is kept


def test_memory_block_lists_each_speakers_memories_with_their_source_messages(tmp_path):
    h = history(speakers=("Caroline", "Melanie"), sessions=2, per_session=2)
    method = Mem0(store_dir=str(tmp_path / "stores"), top_k=3)
    ctx = Context(llms={"memory": FakeLLM()})
    ctx.dense = lambda name="dense": FakeDense()
    q = Question("q1", "single-hop", "Which item does Melanie like?", "item 3", "h1")
    block = asyncio.run(method.build(q, h, ctx))
    assert block.style == "compressed" and block.timings["retrieval"] > 0
    assert "Memories of Caroline:" in block.text and "Memories of Melanie:" in block.text
    assert "- 2023/05/02 (Mon) 10:00: fact 3: Melanie likes item 3" in block.text
    assert 3 in block.shown and set(block.shown) <= {0, 1, 2, 3}
    ingest = block.detail["ingest"]
    assert ingest["built_now"] and ingest["llm_calls"] == 4 and ingest["store"].startswith("h1-")
    assert len(block.detail["memories"]) <= 6
    again = asyncio.run(method.build(q, h, ctx))
    assert not again.detail["ingest"]["built_now"] and again.text == block.text


def test_bad_method_config_is_refused(tmp_path):
    with pytest.raises(ValueError, match="top_k must be >= 1"):
        Mem0(store_dir=str(tmp_path), top_k=0)
    with pytest.raises(ValueError, match=r"threshold must be in \[0, 1\]"):
        Mem0(store_dir=str(tmp_path), threshold=2.0)
    with pytest.raises(FileNotFoundError, match="no_such_prompt"):
        Mem0(store_dir=str(tmp_path), custom_instructions="no_such_prompt")
