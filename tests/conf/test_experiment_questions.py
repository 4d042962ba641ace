"""Every paper experiment x benchmark composes to the questions the paper scores, counted on files shaped
like the full benchmarks (500 LongMemEval questions with Table 9's types; 10 LoCoMo conversations whose last
two hold 314 questions of categories 1-4). LoCoMo is never split: `split: test` keeps all of them."""

from __future__ import annotations

import json

import pytest
from hydra import compose, initialize_config_dir

from lazymem.conf import CONF_DIR
from lazymem.data import DataError, load_dataset

from helpers import TABLE_9

LAST_TWO = (150, 164)  # category 1-4 questions of LoCoMo's last two conversations: 314


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("benchmarks")
    lme = []
    for qtype, (total, *_) in TABLE_9.items():
        for k in range(total):
            lme.append(
                {
                    "question_id": f"{qtype}-{k:03d}",
                    "question_type": qtype,
                    "question": "What did I name my dog?",
                    "answer": "Rex",
                    "question_date": "2023/06/01 (Thu) 10:00",
                    "haystack_dates": ["2023/05/01 (Mon) 09:00"],
                    "haystack_session_ids": ["s1"],
                    "haystack_sessions": [
                        [{"role": "user", "content": "I named my dog Rex.", "has_answer": True}]
                    ],
                    "answer_session_ids": ["s1"],
                }
            )
    (tmp / "longmemeval.json").write_text(json.dumps(lme))
    conversations = []
    for c in range(10):
        n = LAST_TWO[c - 8] if c >= 8 else 5
        qa = [
            {"question": f"q{k}?", "answer": "a", "evidence": ["D1:1"], "category": 1 + k % 4}
            for k in range(n)
        ]
        qa += [{"question": "trap?", "adversarial_answer": "b", "evidence": ["D1:1"], "category": 5}] * 3
        conversations.append(
            {
                "sample_id": f"conv-{c}",
                "conversation": {
                    "speaker_a": "Ann",
                    "speaker_b": "Bo",
                    "session_1_date_time": "1:56 pm on 8 May, 2023",
                    "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I ran a race."}],
                },
                "qa": qa,
            }
        )
    (tmp / "locomo.json").write_text(json.dumps(conversations))
    return tmp


def composed(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose("config", overrides=list(overrides))


# (experiment, benchmark, questions scored): the paper's LongMemEval test split is 100 questions (its
# validation split 40), LoCoMo's categories 1-4 of the last two conversations 314
CASES = [
    ("radius_ablation", "longmemeval", 100),
    ("radius_ablation", "locomo", 314),
    ("stage_ablation", "longmemeval", 100),
    ("stage_ablation", "locomo", 314),
    ("nanomemory_depth", "longmemeval", 100),
    ("nanomemory_depth_locomo", "locomo", 314),
    ("coverage_longmemeval", "longmemeval", 100),
    ("coverage_locomo", "locomo", 314),
    ("perturbation", "longmemeval", 40),
]


@pytest.mark.parametrize("experiment, benchmark, expected", CASES)
def test_each_experiment_scores_the_papers_questions(files, experiment, benchmark, expected):
    cfg = composed(f"+experiment={experiment}", f"data={benchmark}", f"data.path={files / benchmark}.json")
    assert len(load_dataset(cfg.data).questions) == expected


def test_the_main_table_scores_both_benchmarks(files):
    cfg = composed(
        "+experiment=main_table",
        f"benchmarks.longmemeval.path={files / 'longmemeval.json'}",
        f"benchmarks.locomo.path={files / 'locomo.json'}",
    )
    counts = {name: len(load_dataset(data).questions) for name, data in cfg.benchmarks.items()}
    assert counts == {"longmemeval": 100, "locomo": 314}


def test_locomo_has_no_training_split(files):
    cfg = composed("data=locomo", f"data.path={files / 'locomo.json'}", "data.split=train")
    with pytest.raises(DataError, match="has no 'train' split"):
        load_dataset(cfg.data)
