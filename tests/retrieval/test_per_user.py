"""retrieval/per_user.py: the agent memory's port is separate from the research contract. A retriever with
only the three research hooks does not offer it; one with all six per-user hooks does, whatever its class;
the port module stays below the agent wing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lazymem.retrieval.base import Ranking, Retriever
from lazymem.retrieval.dense import DenseRetriever
from lazymem.retrieval.embed_cache import EmbeddingCache
from lazymem.retrieval.per_user import PerUserRetriever

PER_USER_HOOKS = ("for_user", "extend", "warm", "vector_keys", "vector_width", "close")


class Empty:
    embedded = 0

    def search(self, query, k=None):
        return Ranking((), ())


class Research(Retriever):
    """Only what every retriever needs."""

    def build(self, messages):
        return Empty()


class Incremental(Research):
    """The research hooks and the per-user port, as a retriever outside lazymem would write them."""

    def for_user(self, storage):
        return self

    def extend(self, index, messages):
        return None

    def warm(self, messages):
        return 0

    def vector_keys(self, messages):
        return {}

    def vector_width(self, model):
        return None

    def close(self):
        pass


def test_a_retriever_with_the_research_hooks_only_does_not_offer_the_port():
    assert not isinstance(Research(), PerUserRetriever)


def test_a_retriever_with_every_per_user_hook_offers_the_port_without_naming_it():
    assert isinstance(Incremental(), PerUserRetriever)


@pytest.mark.parametrize("missing", PER_USER_HOOKS)
def test_one_missing_hook_is_enough_to_lack_the_port(missing):
    partial = type(
        "Partial", (Research,), {h: getattr(Incremental, h) for h in PER_USER_HOOKS if h != missing}
    )
    assert not isinstance(partial(), PerUserRetriever)


def test_the_dense_retriever_declares_the_port(tmp_path):
    assert PerUserRetriever in DenseRetriever.__mro__

    class Encoder:
        identity = "fake"

    assert isinstance(DenseRetriever(Encoder(), EmbeddingCache(tmp_path)), PerUserRetriever)


def test_the_port_imports_nothing_of_the_agent_wing():
    code = (
        "import sys, lazymem.retrieval.per_user, lazymem.retrieval.dense, lazymem.retrieval.hybrid\n"
        "print(sorted(m for m in sys.modules if m.startswith('lazymem.agent')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
