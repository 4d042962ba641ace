"""methods/lazymem.py in the test process: retrieval, windows, the memory role's KEEP/DROP replies (the LLM
stand-in, tests/standin.py, keeps the messages that share a word with the question) and the memory block.
The same method on a real llama.cpp model: tests/e2e/test_evaluate.py::test_quickstart_on_the_bundled_qwen."""

from __future__ import annotations

import asyncio

from lazymem.construct.windows import build_windows
from lazymem.data.schema import History, Message, Question
from lazymem.llm.llm_set import build_llms
from lazymem.methods.base import Context
from lazymem.methods.lazymem import LazyMem
from lazymem.retrieval.base import SearchResult

from helpers_llm import llm_conf
from standin import STANDIN_SEARCHPATH, words

TEXTS = [
    "Hi, how are you today?",
    "I am fine. I moved my piano to the new apartment last week.",
    "That sounds heavy! Did it survive?",
    "It did. By the way, the weather is lovely.",
    "Let us talk about dinner plans.",
    "I cooked pasta yesterday.",
    "Nice, what sauce?",
    "Tomato, with basil from my balcony.",
    "My sister visited the apartment on Sunday.",
    "Did she like the piano?",
]
HISTORY = History(
    "h",
    [
        Message(i, f"s{i // 4}", f"2024-03-0{1 + i // 4}", ("user", "assistant")[i % 2], t)
        for i, t in enumerate(TEXTS)
    ],
)
QUESTION = Question(
    "q", "single-session-user", "Where did I move my piano?", "the new apartment", "h", gold_idx=(1,)
)


class Retriever:
    """Returns the given ranking: the method's own steps, not retrieval, are under test."""

    n = 3

    def index(self, history):
        pass

    def search(self, history, query, n):
        return SearchResult([1, 8, 5][:n], [0.9, 0.5, 0.1][:n], {"bm25": 0.0})


def test_lazymem_windows_decides_every_message_and_renders_what_it_kept(tmp_path):
    cfg = llm_conf("standin", STANDIN_SEARCHPATH, f"llm.cache_path={tmp_path}/llm.sqlite")
    method = LazyMem(radius=1, max_len=4, stride=3)
    with build_llms(cfg, tmp_path / "servers") as llms:
        block = asyncio.run(method.build(QUESTION, HISTORY, Context(Retriever(), llms)))
        calls = llms["memory"].stats()["calls"]
    windows = build_windows([1, 8, 5], len(TEXTS), 1, 4, 3)
    assert [w["idx"] for w in block.windows] == [list(w.idx) for w in windows]
    assert calls == len(windows)  # one memory-model call per window, all in parallel
    for w in block.windows:
        assert w["outcome"] == "gate_ok" and len(w["decisions"]) == len(w["idx"])
    assert block.retrieved == [1, 8, 5] and block.style == "compressed"
    assert block.decided == sorted({i for w in windows for i in w.idx})
    question = words(QUESTION.text)
    expected = [i for i in block.decided if question & words(TEXTS[i])]
    assert block.shown == expected and 1 in expected  # KEEP where the stand-in kept, nothing else
    assert block.compressed == {i: TEXTS[i] for i in expected}
    assert all(TEXTS[i] in block.text for i in expected)
    assert TEXTS[0] not in block.text  # decided and dropped
    assert block.timings["processing"] > 0
