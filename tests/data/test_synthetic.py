import re
from datetime import timedelta

import pytest

from lazymem.data import longmemeval, synthetic


def test_same_seed_same_data_other_seed_other_data():
    a = synthetic.generate(per_type=2, abstention=3, sessions=6, turns=4, seed=7)
    b = synthetic.generate(per_type=2, abstention=3, sessions=6, turns=4, seed=7)
    c = synthetic.generate(per_type=2, abstention=3, sessions=6, turns=4, seed=8)
    assert a == b and a != c
    assert synthetic.load(seed=7).source["sha256"] == synthetic.load(seed=7).source["sha256"]
    assert synthetic.load(seed=7).source["sha256"] != synthetic.load(seed=8).source["sha256"]


def test_covers_all_six_types_and_abstention():
    ds = synthetic.load(per_type=1, abstention=3)
    assert {q.type for q in ds.questions} == set(longmemeval.TYPES)
    abstain = [q for q in ds.questions if q.abstention]
    assert len(abstain) == 3 and all(q.id.endswith("_abs") for q in abstain)
    assert {q.type for q in abstain} == {"single-session-user", "multi-session", "knowledge-update"}
    assert all("not enough" in q.answer for q in abstain)
    assert all(not q.gold_idx for q in abstain)


def test_size_is_configurable():
    ds = synthetic.load(per_type=3, abstention=0, sessions=9, turns=6)
    assert len(ds.questions) == 18
    for h in ds.histories.values():
        assert len(h.session_ids) == 9 and len(h.messages) == 54
        assert {m.role for m in h.messages} == {"user", "assistant"}
    with pytest.raises(ValueError):
        synthetic.generate(1, 0, sessions=2, turns=4, seed=0)


@pytest.mark.parametrize("seed", range(5))
def test_gold_marks_the_evidence(seed):
    ds = synthetic.load(per_type=2, abstention=0, seed=seed)
    for q in ds.questions:
        h = ds.history(q)
        gold = [h.messages[i] for i in q.gold_idx]
        assert gold, q.id
        assert {m.session_id for m in gold} == set(q.gold_sessions)
        assert all(m.gold for m in gold) and sum(m.gold for m in h.messages) == len(gold)
        evidence = " ".join(m.text for m in gold)
        if q.type in ("single-session-user", "single-session-assistant"):
            assert q.answer in evidence
        if q.type == "knowledge-update":
            assert len(gold) == 2 and q.answer in gold[-1].text  # the later session holds the update
        if q.type == "multi-session":
            assert len(gold) == int(q.answer)
        if q.type == "single-session-assistant":
            assert all(m.role == "assistant" for m in gold)


@pytest.mark.parametrize("seed", range(5))
def test_temporal_answers_follow_the_dates(seed):
    ds = synthetic.load(per_type=2, abstention=0, seed=seed)
    for q in ds.questions:
        h = ds.history(q)
        times = [longmemeval.parse_date(m.time) for m in h.messages]
        assert times == sorted(times)
        assert longmemeval.parse_date(q.date) > times[-1]
        if q.type == "temporal-reasoning":
            (i,) = q.gold_idx
            days = int(re.match(r"(\d+) days ago", q.answer).group(1))
            event = longmemeval.parse_date(h.messages[i].time)
            assert longmemeval.parse_date(q.date).date() - timedelta(days=days) == event.date()


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]+", text.lower()) if len(w) > 3}


def test_every_history_has_a_distractor_that_shares_words_with_the_question():
    filler = {t for texts in synthetic.FILLER.values() for t in texts}
    ds = synthetic.load(per_type=2, abstention=3, seed=1)
    for q in ds.questions:
        h = ds.history(q)
        near_misses = [
            m for m in h.messages if not m.gold and m.text not in filler and _words(m.text) & _words(q.text)
        ]
        evidence = [h.messages[i] for i in q.gold_idx]
        assert near_misses and not set(near_misses) & set(evidence), q.id


def test_evidence_and_questions_come_in_several_phrasings():
    ds = synthetic.load(per_type=12, abstention=0, seed=0)
    user = [q for q in ds.questions if q.type == "single-session-user"]
    assert len({q.text.split()[1] for q in user}) > 1  # "did I name ..." and "is the name ..."
    assert len({ds.history(q).messages[q.gold_idx[0]].text.split()[0] for q in user}) > 1
