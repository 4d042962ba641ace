import json

import pytest

from lazymem.data import DataError, longmemeval


def record(**over):
    rec = {
        "question_id": "q1",
        "question_type": "single-session-user",
        "question": "What did I name my dog?",
        "answer": 7,
        "question_date": "2023/06/01 (Thu) 10:00",
        "haystack_dates": ["2023/05/02 (Tue) 09:00", "2023/05/01 (Mon) 09:00"],
        "haystack_session_ids": ["later", "earlier"],
        "haystack_sessions": [
            [
                {"role": "user", "content": "I named my dog Rex.", "has_answer": True},
                {"role": "assistant", "content": "Nice name!", "has_answer": False},
            ],
            [
                {"role": "user", "content": "Hello"},
                {"role": "assistant", "content": ""},
                {"role": "assistant", "content": "Hi there"},
            ],
        ],
        "answer_session_ids": ["later"],
    }
    rec.update(over)
    return rec


def write(tmp_path, records, name="lme.json"):
    path = tmp_path / name
    path.write_text(json.dumps(records))
    return path


def test_fixture_parses_into_schema(tmp_path):
    ds = longmemeval.load(write(tmp_path, [record(), record(question_id="q2_abs")]))
    q = ds.questions[0]
    h = ds.history(q)
    # sessions reordered chronologically, the empty turn skipped, idx follows the new order
    assert [m.session_id for m in h.messages] == ["earlier", "earlier", "later", "later"]
    assert [m.idx for m in h.messages] == [0, 1, 2, 3]
    assert h.messages[2].text == "I named my dog Rex." and h.messages[2].gold
    assert h.messages[0].time == "2023/05/01 (Mon) 09:00"
    assert q.gold_idx == (2,) and q.gold_sessions == ("later",)
    assert q.answer == "7" and q.date == "2023/06/01 (Thu) 10:00"
    assert not q.abstention and ds.questions[1].abstention
    assert ds.source["empty_turns_skipped"] == 2
    assert len(ds.source["sha256"]) == 64


def test_real_sample_s(lme_s):
    ds = longmemeval.load(lme_s)
    raw = json.loads(lme_s.read_text())
    assert len(ds.questions) == len(raw) == 8
    assert {q.type for q in ds.questions} == set(longmemeval.TYPES)
    assert sum(q.abstention for q in ds.questions) == 2
    for q, r in zip(ds.questions, raw, strict=True):
        h = ds.history(q)
        assert q.answer == str(r["answer"])
        times = [longmemeval.parse_date(m.time) for m in h.messages]
        assert times == sorted(times)
        n_flagged = sum(
            t.get("has_answer", False) for s in r["haystack_sessions"] for t in s if t["content"].strip()
        )
        assert len(q.gold_idx) == n_flagged
        assert all(h.messages[i].session_id in r["answer_session_ids"] for i in q.gold_idx)


def test_real_sample_oracle_holds_only_evidence_sessions(lme_s, lme_oracle):
    s, o = longmemeval.load(lme_s), longmemeval.load(lme_oracle)
    assert sorted(q.id for q in s.questions) == sorted(q.id for q in o.questions)
    by_id = {q.id: q for q in s.questions}
    for qo in o.questions:
        qs = by_id[qo.id]
        assert qo.gold_sessions == qs.gold_sessions
        assert set(o.history(qo).session_ids) <= set(s.history(qs).session_ids)
        assert len(o.history(qo).messages) < len(s.history(qs).messages) / 5
        if not qo.abstention:
            assert qo.gold_idx and set(o.history(qo).session_ids) == set(qo.gold_sessions)


@pytest.mark.parametrize(
    ("records", "record_id", "field"),
    [
        ([record(question_type="single-session-everything")], "q1", "question_type"),
        ([{k: v for k, v in record().items() if k != "question"}], "q1", "question"),
        ([record(haystack_dates=["2023/05/01 (Mon) 09:00"])], "q1", "haystack_sessions"),
        ([record(question_date="yesterday")], "q1", "question_date"),
        ([record(haystack_sessions=[[{"role": "user"}], []])], "q1", "haystack_sessions[0][0].content"),
        ([record(answer=None)], "q1", "answer"),
        ([record(), record()], "q1", "question_id"),
        ([record(), "not an object"], 1, None),
    ],
)
def test_bad_records_name_file_record_and_field(tmp_path, records, record_id, field):
    path = write(tmp_path, records)
    with pytest.raises(DataError) as err:
        longmemeval.load(path)
    assert err.value.path == str(path) and err.value.record == record_id and err.value.field == field
    assert str(path) in str(err.value)


def test_truncated_and_missing_files(tmp_path):
    full = json.dumps([record()])
    path = tmp_path / "cut.json"
    path.write_text(full[: len(full) // 2])
    with pytest.raises(DataError, match="truncated"):
        longmemeval.load(path)
    with pytest.raises(DataError, match="no such file"):
        longmemeval.load(tmp_path / "absent.json")
    path.write_text("")
    with pytest.raises(DataError, match=r"cut.json: the file is empty, expected JSON$"):
        longmemeval.load(path)
    path.write_text('[{"question_id": "q1", "question": "unterminated')
    cut_in_a_string = (
        r"valid JSON at line 1, column 36: Unterminated string starting at \(the file looks truncated\)$"
    )
    with pytest.raises(DataError, match=cut_in_a_string):
        longmemeval.load(path)
    path.write_text(json.dumps({"questions": []}))
    with pytest.raises(DataError, match="expected a JSON list"):
        longmemeval.load(path)


def test_hub_failure_says_where_to_put_the_file(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # huggingface_hub reads the variable once, at import: a test that imported it earlier (through
    # sentence-transformers) would otherwise send this one to the network until it times out
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(DataError, match="data.path="):
        longmemeval.load(None, hub_file="longmemeval_s_cleaned.json")
