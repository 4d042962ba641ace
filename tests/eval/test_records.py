import json

import pytest

from lazymem.eval.records import Records, RecordsExist, read_records


def rec(method, qid, status="ok"):
    return {"method": method, "qid": qid, "status": status, "error": None if status == "ok" else "boom"}


def test_append_and_resume_keeps_ok_drops_errors_and_torn_lines(tmp_path):
    path = tmp_path / "records.jsonl"
    r = Records(path)
    r.append(rec("m", "q1"))
    r.append(rec("m", "q2", "error"))
    r.append(rec("n", "q1"))
    with open(path, "a") as f:
        f.write('{"method": "m", "qid": "q3", "sta')  # a write cut by SIGKILL
    again = Records(path, resume=True)
    assert again.done("m", "q1") and again.done("n", "q1")
    assert not again.done("m", "q2") and not again.done("m", "q3")
    assert again.dropped == {"errors": 1, "torn_lines": 1}
    assert [(x["method"], x["qid"]) for x in read_records(path)] == [("m", "q1"), ("n", "q1")]
    again.append(rec("m", "q2"))
    keys = [(x["method"], x["qid"]) for x in read_records(path)]
    assert len(keys) == len(set(keys)) == 3


def test_never_writes_a_key_twice_and_refuses_to_clobber(tmp_path):
    path = tmp_path / "records.jsonl"
    r = Records(path)
    r.append(rec("m", "q1"))
    with pytest.raises(ValueError):
        r.append(rec("m", "q1"))
    with pytest.raises(RecordsExist, match="resume=true"):
        Records(path)
    assert len(path.read_text().splitlines()) == 1
    assert json.loads(path.read_text())["qid"] == "q1"
