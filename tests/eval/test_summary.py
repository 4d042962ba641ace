"""lazymem.eval.summary: summary() fills the one shape, write_summary/read_summary round-trip it, and a
missing, unreadable or foreign summary.json is a SummaryError that names the file and what is wrong."""

import json
import re

import pytest

from lazymem.eval.summary import FILE, SummaryError, check, read_summary, summary, write_summary


def bench(**methods):
    return {
        "dataset": "synthetic",
        "judge": {"model": "judge-model", "style": "longmemeval"},
        "methods": methods or {"oracle_turn": {"questions": 2, "accuracy": 0.5}},
        "resume_dropped": {"errors": 0, "torn": 0},
    }


def test_summary_has_every_section_and_copies_what_it_is_given():
    empty = summary("evaluate")
    assert empty == {"task": "evaluate", "benchmarks": {}, "llm": {}, "tables": {}}
    benchmarks = {"synthetic": bench()}
    s = summary("main_table", benchmarks, {"answer": {"calls": 3}}, {"perturbation": {"rows": []}})
    assert s["benchmarks"] == benchmarks and s["benchmarks"] is not benchmarks
    assert s["llm"] == {"answer": {"calls": 3}} and s["tables"] == {"perturbation": {"rows": []}}


def test_write_then_read_gives_the_same_summary(tmp_path):
    s = summary("evaluate", {"synthetic": bench()}, {"judge": {"calls": 2, "server_restarts": 0}})
    path = write_summary(tmp_path, s)
    assert path == tmp_path / FILE == tmp_path / "summary.json"
    assert path.read_text().endswith("}\n")
    assert json.loads(path.read_text()) == s
    assert read_summary(tmp_path) == s
    assert read_summary(str(tmp_path)) == s


def test_write_summary_refuses_a_malformed_summary_and_writes_nothing(tmp_path):
    s = summary("evaluate")
    del s["llm"]
    with pytest.raises(
        SummaryError, match=rf"^{re.escape(str(tmp_path / FILE))}: not a lazymem summary \(no 'llm'\)"
    ):
        write_summary(tmp_path, s)
    assert not (tmp_path / FILE).exists()


def test_read_summary_of_a_directory_without_one_names_the_file(tmp_path):
    with pytest.raises(SummaryError) as err:
        read_summary(tmp_path)
    assert (
        str(err.value) == f"{tmp_path / FILE}: no such file (the run did not finish, or is not a lazymem run)"
    )


def test_read_summary_of_broken_json_is_unreadable(tmp_path):
    (tmp_path / FILE).write_text('{"task": "evaluate", "benchmarks": {')
    with pytest.raises(SummaryError, match=rf"^{re.escape(str(tmp_path / FILE))}: unreadable: Expecting"):
        read_summary(tmp_path)


def test_read_summary_of_a_file_that_is_not_utf8_is_unreadable(tmp_path):
    (tmp_path / FILE).write_bytes(b'{"task": "\xff\xfe"}')
    with pytest.raises(SummaryError, match=rf"^{re.escape(str(tmp_path / FILE))}: unreadable: "):
        read_summary(tmp_path)


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ([1, 2], "a JSON list, not an object"),
        ("summary", "a JSON str, not an object"),
        ({"task": "evaluate", "llm": {}}, "no 'benchmarks', 'tables'"),
        (
            {"task": "t", "benchmarks": [], "llm": {}, "tables": {}},
            "'benchmarks' and 'tables' must be objects",
        ),
        (
            {"task": "t", "benchmarks": {}, "llm": {}, "tables": []},
            "'benchmarks' and 'tables' must be objects",
        ),
        (
            {"task": "t", "benchmarks": {"lme": {"dataset": "x", "methods": {}}}, "llm": {}, "tables": {}},
            "benchmark 'lme' has no 'judge', 'resume_dropped'",
        ),
        (
            {"task": "t", "benchmarks": {"lme": "results"}, "llm": {}, "tables": {}},
            "benchmark 'lme' has no 'dataset', 'judge', 'methods', 'resume_dropped'",
        ),
        (
            {
                "task": "t",
                "benchmarks": {"lme": bench(rag={"accuracy": 1.0}, mem0=0.4)},
                "llm": {},
                "tables": {},
            },
            "benchmark 'lme': every method's summary must be an object",
        ),
        (
            {
                "task": "t",
                "benchmarks": {"lme": {**bench(rag={"accuracy": 1.0}), "methods": ["rag"]}},
                "llm": {},
                "tables": {},
            },
            "benchmark 'lme': 'methods' must be an object of method summaries",
        ),
        (
            {
                "task": "t",
                "benchmarks": {},
                "llm": {},
                "tables": {"perturbation": {}, "table5": {}, "fig2": {}},
            },
            "unknown tables ['fig2', 'table5']; "
            "known: ['perturbation', 'reward_diagnostics', 'construction']",
        ),
    ],
    ids=[
        "list",
        "string",
        "missing-keys",
        "benchmarks-list",
        "tables-list",
        "bench-keys",
        "bench-str",
        "method-not-object",
        "methods-list",
        "unknown-tables",
    ],
)
def test_a_foreign_summary_is_an_error_naming_the_file_and_the_problem(tmp_path, doc, problem):
    (tmp_path / FILE).write_text(json.dumps(doc))
    with pytest.raises(SummaryError) as err:
        read_summary(tmp_path)
    message = str(err.value)
    assert message.startswith(f"{tmp_path / FILE}: not a lazymem summary ({problem})")
    assert "another version of lazymem or another program" in message


def test_check_accepts_the_known_task_tables_and_returns_the_summary():
    s = summary("perturbation", tables={"perturbation": {"rows": [1]}, "reward_diagnostics": {}})
    assert check(s, "here") is s
    with pytest.raises(SummaryError, match=r"^somewhere: not a lazymem summary"):
        check({}, "somewhere")
