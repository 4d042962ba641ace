from lazymem.data.schema import DataError, Dataset, History, Message, Question


def test_history_sessions_and_subset():
    msgs = [Message(i, f"s{i // 2}", "t", "user", f"m{i}") for i in range(5)]
    h = History("h1", msgs)
    assert h.session_ids == ["s0", "s1", "s2"] and [m.idx for m in h.session("s1")] == [2, 3]
    q1 = Question("q1", "t", "?", "a", "h1", gold_idx=(1,))
    q2 = Question("q2", "t", "?", "a", "h2")
    ds = Dataset("x", {"h1": h, "h2": History("h2", [])}, [q1, q2], {"path": "p"})
    sub = ds.subset(["q1"])
    assert [q.id for q in sub.questions] == ["q1"] and list(sub.histories) == ["h1"]
    assert sub.history(q1) is h and sub.source == {"path": "p"} and sub.source is not ds.source


def test_data_error_names_file_record_and_field():
    e = DataError("/d/file.json", "q7", "answer", "missing")
    assert str(e) == "file /d/file.json, record q7, field 'answer': missing"
    assert str(DataError("/d/f.json", None, None, "no such file")) == "file /d/f.json: no such file"
