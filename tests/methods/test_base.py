"""lazymem.methods.base: MemoryBlock's style check and defaults, the Method protocol, and Context: its
errors without a retriever, and one retrieval per question reused (with its first latency) until a new
pass."""

import asyncio
from dataclasses import replace

import pytest

from lazymem.methods.base import STYLES, Context, MemoryBlock, Method, NotApplicable
from lazymem.methods.oracle import OracleTurn
from lazymem.retrieval.bm25 import BM25Retriever
from lazymem.retrieval.hybrid import HybridRetriever

from helpers import ask, make_history

HISTORY = make_history(
    [
        ("s1", "2023/01/01", ["I adopted a dog last week", "congrats on the dog", "tax forms", "due soon"]),
        ("s2", "2023/01/05", ["I named the dog Biscuit", "lovely name", "weather is cold", "wrap up"]),
        ("s3", "2023/02/01", ["the dog chewed my shoes", "puppies do that", "new shoes", "nice"]),
    ]
)


class CountingRetriever(HybridRetriever):
    """The real BM25 retrieval, counting the searches Context asks of it."""

    def __init__(self, n):
        super().__init__({"bm25": BM25Retriever()}, n=n)
        self.searches = []

    def search(self, history, query, n=None):
        self.searches.append(n)
        return super().search(history, query, n)


def test_memory_block_rejects_an_unknown_style_naming_the_allowed_ones():
    assert STYLES == ("compressed", "raw")
    with pytest.raises(ValueError, match=r"memory style 'notes' not in \('compressed', 'raw'\)"):
        MemoryBlock(text="x", style="notes", shown=[])
    for style in STYLES:
        assert MemoryBlock(text="x", style=style, shown=[0]).style == style


def test_memory_block_optional_fields_start_empty_and_are_not_shared():
    a = MemoryBlock(text="", style="raw", shown=[])
    b = MemoryBlock(text="", style="raw", shown=[])
    for name in ("timings", "retrieved", "scores", "windows", "decided", "compressed", "detail"):
        assert not getattr(a, name)
    a.timings["retrieval"] = 1.0
    a.detail["k"] = "v"
    a.retrieved.append(3)
    assert b.timings == {} and b.detail == {} and b.retrieved == []


def test_method_protocol_needs_name_roles_needs_retrieval_and_build():
    assert isinstance(OracleTurn(), Method)

    class NoRetrievalFlag:
        name, roles = "x", ()

        async def build(self, question, history, ctx):
            return MemoryBlock("", "raw", [])

    class NoBuild:
        name, roles, needs_retrieval = "x", (), False

    assert not isinstance(NoRetrievalFlag(), Method)
    assert not isinstance(NoBuild(), Method)


def test_not_applicable_is_an_ordinary_exception():
    assert issubclass(NotApplicable, Exception) and not issubclass(NotApplicable, ValueError)


def test_context_without_a_retriever_names_what_the_method_needed():
    ctx = Context()
    assert ctx.retriever is None and ctx.llms is None and ctx.dataset_name is None
    with pytest.raises(RuntimeError, match="needs retrieval but the job has no retriever configured"):
        ctx.search(ask(), HISTORY, 5)
    with pytest.raises(
        RuntimeError, match="needs the dense retriever 'encoder' but the job has no retriever"
    ):
        ctx.dense("encoder")


def test_context_dense_asks_the_jobs_retriever_by_name():
    ctx = Context(CountingRetriever(n=5), dataset_name="longmemeval")
    assert ctx.dataset_name == "longmemeval"
    with pytest.raises(
        ValueError, match=r"no dense retriever named 'dense' in this job's retrieval .*\['bm25'\]"
    ):
        ctx.dense()


def test_context_search_returns_the_top_n_of_the_retrievers_ranking():
    retriever = CountingRetriever(n=10)
    head, seconds = Context(retriever).search(ask("Which dog did I adopt?"), HISTORY, 2)
    full = retriever.search(HISTORY, "Which dog did I adopt?", 10)
    assert head.indices == full.indices[:2] and head.scores == full.scores[:2]
    assert all("dog" in HISTORY.messages[i].text for i in head.indices)
    assert seconds >= 0.0


def test_context_search_runs_once_per_question_and_charges_later_methods_its_first_latency():
    retriever = CountingRetriever(n=3)
    ctx = Context(retriever)
    q = ask("the dog")  # matches 4 messages: the retriever's n=3 results are all full
    first, seconds = ctx.search(q, HISTORY, 3)
    again, seconds_again = ctx.search(q, HISTORY, 2)
    assert retriever.searches == [3]  # searched once, at least the retriever's own n deep
    assert again.indices == first.indices[:2] and seconds_again == seconds
    other = replace(q, id="q2")  # another question: its own search
    ctx.search(other, HISTORY, 3)
    assert retriever.searches == [3, 3]


def test_context_search_deeper_than_the_cached_result_searches_again():
    retriever = CountingRetriever(n=2)
    ctx = Context(retriever)
    q = ask("the dog")
    ctx.search(q, HISTORY, 2)
    deeper, _ = ctx.search(q, HISTORY, 4)
    assert retriever.searches == [2, 4] and len(deeper.indices) == 4


def test_a_search_that_found_fewer_than_asked_is_not_run_again():
    """BM25 alone returns only messages sharing a word with the question: fewer than n is its full answer."""
    retriever = CountingRetriever(n=3)
    ctx = Context(retriever)
    q = ask("Biscuit")
    first, seconds = ctx.search(q, HISTORY, 5)
    assert 0 < len(first.indices) < 5
    again, seconds_again = ctx.search(q, HISTORY, 5)
    assert retriever.searches == [5] and again.indices == first.indices and seconds_again == seconds


def test_new_pass_forgets_searches_but_keeps_the_indexes():
    retriever = CountingRetriever(n=3)
    ctx = Context(retriever)
    q = ask("the dog")
    ctx.search(q, HISTORY, 3)
    ctx.new_pass()
    ctx.search(q, HISTORY, 3)
    assert retriever.searches == [3, 3]
    assert retriever.builds == 1  # the history's index was built once


def test_a_method_builds_through_the_context_it_is_given():
    class RetrieveTwo:
        name, roles, needs_retrieval = "two", (), True

        async def build(self, question, history, ctx):
            result, seconds = ctx.search(question, history, 2)
            return MemoryBlock("", "raw", sorted(result.indices), timings={"retrieval": seconds})

    method = RetrieveTwo()
    assert isinstance(method, Method)
    memory = asyncio.run(method.build(ask("the dog"), HISTORY, Context(CountingRetriever(n=5))))
    assert len(memory.shown) == 2 and memory.timings["retrieval"] >= 0.0
