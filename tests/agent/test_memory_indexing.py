"""Indexing at write time (Memory.aindex_pending): added messages are embedded once, before the first
query, and a query that comes first still answers from everything."""

from __future__ import annotations

from lazymem import Memory
from lazymem.retrieval.embed_cache import EmbeddingCache


def test_added_messages_are_embedded_before_the_first_query(tmp_path):
    overrides = ["method=rag", "method.top_k=3", f"agent.dir={tmp_path / 'data'}", f"paths.cache={tmp_path}"]
    with Memory.from_config(overrides) as memory:
        memory.add("kim", [{"role": "user", "text": f"note number {n}"} for n in range(40)])
        memory.add("kim", [{"role": "user", "text": "My bike is red."}])
        memory.add("lee", [{"role": "user", "text": "I ski in winter."}])
        assert memory.index_pending() == 2 and memory.index_pending() == 0
        (user_dir,) = [d for d in (tmp_path / "data" / "users").iterdir() if EmbeddingCache(d).count() == 41]
        recall = memory.query("kim", "What colour is my bike?")
        assert "red" in recall.text and EmbeddingCache(user_dir).count() == 41  # nothing embedded again

        memory.add("kim", [{"role": "user", "text": "I sold the bike; now I walk."}])  # not indexed yet
        assert "walk" in memory.query("kim", "How do I get around now?").text
        assert EmbeddingCache(user_dir).count() == 42
