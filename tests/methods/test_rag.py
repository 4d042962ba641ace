"""methods/rag.py over a real BM25-only retrieval: the top k retrieved messages, verbatim and in chronological
order, with the ranking, scores and retrieval time it came from."""

from __future__ import annotations

import asyncio

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from lazymem.conf import CONF_DIR
from lazymem.methods.base import Context, Method
from lazymem.methods.rag import RAG
from lazymem.retrieval.bm25 import BM25Retriever
from lazymem.retrieval.hybrid import HybridRetriever

from helpers import ask, make_history

HISTORY = make_history(
    [
        ("s1", "2024/01/01", ["My sister has a dog called Pepper.", "Pepper is a cute name for a dog."]),
        ("s2", "2024/01/08", ["Any tips for the garden?", "Water the tomatoes every morning."]),
        ("s3", "2024/01/15", ["I adopted a dog and named her Biscuit!", "Biscuit is a lovely name."]),
        ("s4", "2024/01/22", ["The weather is grey today.", "Perhaps it will clear up later."]),
    ]
)
QUESTION = ask()  # "What did I name the dog I adopted?"


def bm25() -> HybridRetriever:
    return HybridRetriever({"bm25": BM25Retriever()})


def build(method: RAG, ctx: Context):
    return asyncio.run(method.build(QUESTION, HISTORY, ctx))


def test_rag_shows_the_top_k_verbatim_in_chronological_order():
    ranked = bm25().search(HISTORY, QUESTION.text, 3)
    assert ranked.indices[0] == 4 and ranked.indices != sorted(ranked.indices)  # best first, not by time
    block = build(RAG(top_k=3), Context(bm25()))
    assert block.retrieved == ranked.indices
    assert block.shown == sorted(ranked.indices)
    shown = [HISTORY.messages[i] for i in block.shown]
    assert block.text == "\n".join(f"[{m.time}] {m.role}: {m.text}" for m in shown)  # verbatim
    assert block.style == "raw"
    assert block.scores == [round(s, 6) for s in ranked.scores]
    assert block.scores == sorted(block.scores, reverse=True)


def test_rag_records_only_its_retrieval_time_and_no_construction():
    block = build(RAG(top_k=3), Context(bm25()))
    assert list(block.timings) == ["retrieval"] and block.timings["retrieval"] >= 0
    assert block.windows == [] and block.decided == [] and block.compressed == {} and block.detail == {}


def test_rag_shows_fewer_than_k_when_fewer_messages_match():
    """BM25 ranks only messages sharing a term with the question: the rest are never shown."""
    block = build(RAG(top_k=20), Context(bm25()))
    assert block.shown == [0, 1, 4, 5]  # the dog and name messages; the garden and weather ones share nothing
    assert len(block.retrieved) == len(block.scores) == 4


def test_a_question_sharing_no_word_with_the_history_gets_an_empty_block():
    block = asyncio.run(RAG(top_k=5).build(ask("Which violin concerto?"), HISTORY, Context(bm25())))
    assert (block.text, block.shown, block.retrieved, block.scores) == ("", [], [], [])


def test_a_smaller_rag_reuses_the_larger_ones_retrieval():
    retriever = bm25()
    ctx = Context(retriever)
    top5, top2 = build(RAG("rag_top5", 5), ctx), build(RAG("rag_top2", 2), ctx)
    assert top2.retrieved == top5.retrieved[:2] and top2.shown == sorted(top5.retrieved[:2])
    assert top2.timings == top5.timings  # charged the one search's time
    assert retriever.builds == 1


def test_rag_without_a_retriever_fails_naming_it():
    with pytest.raises(RuntimeError, match="needs retrieval but the job has no retriever configured"):
        build(RAG(), Context())


def test_rag_is_a_method_that_needs_retrieval_and_no_llm_role():
    rag = RAG()
    assert isinstance(rag, Method)
    assert (rag.name, rag.top_k, rag.needs_retrieval, rag.roles) == ("rag", 20, True, ())


@pytest.mark.parametrize("option, name, k", [("rag", "rag_top20", 20), ("rag_top50", "rag_top50", 50)])
def test_the_configs_name_rag_by_its_k(option, name, k):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[f"method={option}"])
    method = instantiate(cfg.method)
    assert isinstance(method, RAG) and (method.name, method.top_k) == (name, k)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["method=rag", "method.top_k=7"])
    assert instantiate(cfg.method).name == "rag_top7"
