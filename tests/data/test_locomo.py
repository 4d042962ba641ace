import json
from collections import Counter

import pytest

from lazymem.data import DataError, locomo

NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


def conversation(sample_id="c1", qa=None):
    return {
        "sample_id": sample_id,
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bo",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I ran a charity race."},
                {"speaker": "Bo", "dia_id": "D1:2", "text": "Nice!", "blip_caption": "a photo of a medal"},
            ],
            "session_10_date_time": "2:00 pm on 20 May, 2023",
            "session_10": [{"speaker": "Ann", "dia_id": "D10:5", "text": "We moved to Paris."}],
            "session_2_date_time": "9:00 am on 9 May, 2023",
            "session_2": [{"speaker": "Bo", "dia_id": "D2:1", "text": "Back from Rome."}],
            "session_11_date_time": "a session that does not exist",
        },
        "qa": qa
        if qa is not None
        else [
            {"question": "Where did Ann move?", "answer": "Paris", "evidence": ["D10:05"], "category": 4},
            {"question": "What happened in May?", "answer": 2023, "evidence": ["D1:1; D2:1"], "category": 1},
            {"question": "Who?", "answer": "x", "evidence": [], "category": 2},
            {"question": "Ghost?", "answer": "y", "evidence": ["D7:3", "D1:2"], "category": 3},
            {"question": "Trap?", "adversarial_answer": "Rome", "evidence": ["D2:1"], "category": 5},
        ],
    }


def load(tmp_path, records, **kw):
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(records))
    return locomo.load(str(path), category_names=NAMES, **kw)


def test_fixture_evidence_forms_are_resolved_and_counted(tmp_path):
    ds = load(tmp_path, [conversation()], conversations=[0])
    h = ds.histories["c1"]
    # sessions in numeric order (1, 2, 10), phantom session 11 ignored
    assert [m.text for m in h.messages][0] == "I ran a charity race."
    assert [m.session_id for m in h.messages] == [
        "c1/session_1",
        "c1/session_1",
        "c1/session_2",
        "c1/session_10",
    ]
    assert h.messages[1].text.endswith("[shares an image: a photo of a medal]")
    assert h.messages[3].time == "2:00 pm on 20 May, 2023"
    by_text = {q.text: q for q in ds.questions}
    assert by_text["Where did Ann move?"].gold_idx == (3,)  # zero-padded D10:05
    assert by_text["What happened in May?"].gold_idx == (0, 2)  # packed entry
    assert by_text["What happened in May?"].answer == "2023"
    assert by_text["Who?"].gold_idx == ()
    assert by_text["Ghost?"].gold_idx == (1,)  # D7:3 does not exist
    assert by_text["Where did Ann move?"].type == "single-hop"
    assert "Trap?" not in by_text  # category 5 excluded by default
    assert ds.source["evidence"] == {
        "packed_entries": 1,
        "questions_without_evidence": 1,
        "resolved_ids": 4,
        "unresolved_ids": 1,
        "zero_padded_ids": 1,
    }
    assert [m.gold for m in h.messages] == [True, True, True, True]


def test_adversarial_category_is_an_abstention(tmp_path):
    ds = load(tmp_path, [conversation()], conversations=[0], categories=[5])
    (q,) = ds.questions
    assert q.abstention and q.type == "adversarial" and q.answer == locomo.ABSTAIN_ANSWER


def test_conversation_selection(tmp_path):
    records = [conversation("a", qa=[]), conversation("b", qa=[]), conversation("c", qa=[])]
    assert list(load(tmp_path, records).histories) == ["b", "c"]  # default: the last two
    assert list(load(tmp_path, records, conversations=["a"]).histories) == ["a"]
    with pytest.raises(DataError, match="no conversation at position 5"):
        load(tmp_path, records, conversations=[5])
    with pytest.raises(DataError, match="sample_id"):
        load(tmp_path, records, conversations=["zzz"])


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda c: c["qa"][0].pop("category"), "category"),
        (lambda c: c["qa"][0].update(category=9), "category"),
        (lambda c: c["qa"][0].pop("answer"), "answer"),
        (lambda c: c["conversation"].pop("session_2_date_time"), "session_2_date_time"),
        (lambda c: c["conversation"]["session_1"][0].pop("text"), "conversation.session_1[0].text"),
        (lambda c: c.pop("qa"), "qa"),
    ],
)
def test_bad_records_name_file_record_and_field(tmp_path, mutate, field):
    conv = conversation()
    mutate(conv)
    with pytest.raises(DataError) as err:
        load(tmp_path, [conv], conversations=[0])
    assert err.value.field == field and err.value.record in {"c1", "c1_q0"}
    assert "locomo.json" in str(err.value)


def test_real_file_last_two_conversations(locomo_file):
    raw = json.loads(locomo_file.read_text())
    ds = locomo.load(str(locomo_file), category_names=NAMES)
    expected = Counter(
        NAMES[q["category"]] for conv in raw[-2:] for q in conv["qa"] if q["category"] in (1, 2, 3, 4)
    )
    assert Counter(q.type for q in ds.questions) == expected
    assert list(ds.histories) == [raw[-2]["sample_id"], raw[-1]["sample_id"]]
    n_turns = sum(
        len(v)
        for k, v in raw[-1]["conversation"].items()
        if k.startswith("session_") and not k.endswith("date_time")
    )
    assert len(ds.histories[raw[-1]["sample_id"]].messages) == n_turns
    with_evidence = [q for q in ds.questions if q.gold_idx]
    assert len(with_evidence) >= 0.95 * len(ds.questions)
    ev = ds.source["evidence"]
    assert ev["resolved_ids"] > 0 and sum(ev.values()) > 0
