"""task=train_reranker: gold/hard-negative pairs, validation samples, and a tiny real fine-tuning run."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from lazymem.conf import CONF_DIR
from lazymem.data.schema import Dataset, History, Message, Question
from lazymem.retrieval.base import SearchResult
from lazymem.retrieval.rerank import CrossEncoderReranker
from lazymem.tasks.train_reranker import fit, rerank_samples, split_datasets, training_pairs

TEXTS = ["hi", "I adopted a dog named Biscuit", "nice", "my dog loves walks", "tax forms", "weather"]
HISTORY = History(
    "h", [Message(i, "s", "2024/01/01", ("user", "assistant")[i % 2], t) for i, t in enumerate(TEXTS)]
)
QUESTIONS = [
    Question("q1", "single-session-user", "What is my dog called?", "Biscuit", "h", gold_idx=(1,)),
    Question("q2", "single-session-user", "What is my cat called?", "unknown", "h", abstention=True),
]
DATA = Dataset("toy", {"h": HISTORY}, QUESTIONS)


class Ranked:
    """Retrieval that ranks the dog messages first, then the rest in order."""

    def search(self, history, query, n=None):
        order = [3, 1, 0, 2, 4, 5][:n]
        return SearchResult(indices=order, scores=[1.0] * len(order), timings={})


def test_pairs_are_gold_positives_and_top_ranked_non_gold_negatives():
    pairs = training_pairs(DATA, Ranked(), negatives=2, template="{role}: {text}")
    assert pairs == [
        ("What is my dog called?", "assistant: I adopted a dog named Biscuit", 1),
        ("What is my dog called?", "assistant: my dog loves walks", 0),  # the hardest negative first
        ("What is my dog called?", "user: hi", 0),
    ]  # the abstention question has no gold and gives no pairs


def test_validation_samples_hold_the_candidates_the_reranker_reorders():
    (sample,) = rerank_samples(DATA, Ranked(), candidates=3, template="{text}")
    assert sample == {
        "query": "What is my dog called?",
        "positive": ["I adopted a dog named Biscuit"],
        "negative": ["my dog loves walks", "hi"],
    }


@pytest.mark.slow
def test_a_tiny_fine_tuning_run_saves_a_checkpoint_the_reranker_loads(tmp_path):
    pytest.importorskip("datasets")
    pairs = training_pairs(DATA, Ranked(), negatives=4, template="{text}") * 4
    samples = rerank_samples(DATA, Ranked(), candidates=6, template="{text}")
    opts = OmegaConf.create(
        {
            "base_model": "bundled:all-minilm-l6-v2",
            "max_length": 32,
            "epochs": 2,
            "batch_size": 4,
            "learning_rate": 1e-4,
            "seed": 0,
            "device": "cpu",
        }
    )
    best = fit(pairs, samples, opts, tmp_path)
    assert 0.0 <= best["ndcg@10_after"] <= 1.0
    reranker = CrossEncoderReranker(str(tmp_path / "reranker"), device="cpu", max_length=32)
    scores = reranker.score("What is my dog called?", HISTORY.messages)
    assert len(scores) == len(TEXTS) and len(set(scores)) > 1


def synthetic(seed: int) -> dict:
    loader = {"_target_": "lazymem.data.synthetic.load", "per_type": 1, "abstention": 0, "seed": seed}
    return {"name": "synthetic", "loader": loader, "split": None, "limit": None}


def test_validation_histories_that_training_reads_are_refused():
    opts = OmegaConf.create({"val_path": None, "val_data": {}})
    with pytest.raises(SystemExit, match="validation histories are also training histories"):
        split_datasets(OmegaConf.create(synthetic(0)), opts)
    opts.val_data = {"loader": {"seed": 1}}  # other generated histories
    train, val = split_datasets(OmegaConf.create(synthetic(0)), opts)
    assert train.questions and val.questions and train.questions != val.questions


def test_locomo_validation_holds_out_whole_conversations(locomo_file):
    def compose_split(*overrides):
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            cfg = compose(
                "config",
                overrides=[
                    "+experiment=train_reranker_cpu",
                    "data=locomo",
                    f"data.path={locomo_file}",
                    "data.loader.conversations=[0,1]",
                    "reranker_train.val_path=null",
                    *overrides,
                ],
            )
        return split_datasets(cfg.data, cfg.reranker_train)

    train, val = compose_split("reranker_train.val_data={loader: {conversations: [2]}}")
    assert len(train.histories) == 2 and len(val.histories) == 1
    assert not set(train.histories) & set(val.histories)
    with pytest.raises(SystemExit, match="val_data"):
        compose_split("reranker_train.val_data={loader: {conversations: [1]}}")
    with pytest.raises(SystemExit, match="2 validation histories"):
        compose_split()  # the same file and conversations: validation would be training data
