"""lazymem.prompts: bundled templates by name or any file by path, their fields, versions and the errors for
what cannot be found."""

from __future__ import annotations

import hashlib
import json
import string

import pytest

from lazymem.prompts import BUNDLED, Template, load, load_json

from helpers import run_cli

# each bundled template -> the str.format fields its caller passes (construct/processor.py, eval/pipeline.py,
# eval/judge.py, methods/nanomemory.py, train/reasoning_chain.py); a system prompt is sent as it is
FIELDS = {
    "memory_system": set(),
    "memory_user": {"n_messages", "query", "query_time", "window"},
    "answer_system": set(),
    "answer_compressed": {"memory", "query", "query_time"},
    "answer_compressed_memory_first": {"memory", "query", "query_time"},
    "answer_raw": {"memory", "query", "query_time"},
    "answer_raw_memory_first": {"memory", "query", "query_time"},
    "judge_locomo": {"answer", "question", "response"},
    "judge_longmemeval": {"answer", "question", "response", "rule"},
    "nanomemory_system": set(),
    "nanomemory_user": {"n_sessions", "none_marker", "query", "query_time", "sessions"},
    "reasoning_chain_system": set(),
    "reasoning_chain_user": {"answer", "evidence", "query", "query_time"},
}


def fields(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}


def test_a_bundled_template_loads_by_name():
    t = load("memory_user")
    assert t.name == "memory_user"
    assert t.path == (BUNDLED / "memory_user.txt").resolve()
    assert t.text == (BUNDLED / "memory_user.txt").read_text()
    assert t.bundled


def test_every_bundled_template_is_known_with_the_fields_its_caller_fills():
    assert {p.stem for p in BUNDLED.glob("*.txt")} == set(FIELDS)
    for name, expected in FIELDS.items():
        assert fields(load(name).text) == expected, name


def test_every_bundled_template_formats_with_its_fields_and_keeps_doubled_braces_literal():
    for name, expected in FIELDS.items():
        values = {f: f"<{f}>" for f in expected}
        text = load(name).format(**values)
        assert all(v in text for v in values.values()), name
    user = load("memory_user").format(n_messages=3, query="q", query_time="t", window="w")
    assert '[{"op": "KEEP" or "DROP"' in user and "{{" not in user


def test_a_missing_field_fails_naming_it():
    with pytest.raises(KeyError, match="window"):
        load("memory_user").format(n_messages=3, query="q", query_time="t")


def test_a_users_file_loads_by_path_and_is_not_bundled(tmp_path):
    path = tmp_path / "my_answer.txt"
    path.write_text("Q: {query}\nM: {memory}\n")
    t = load(str(path))
    assert (t.name, t.text, t.path) == ("my_answer", "Q: {query}\nM: {memory}\n", path.resolve())
    assert not t.bundled
    assert t.format(query="where?", memory="(none)") == "Q: where?\nM: (none)\n"


def test_a_path_without_an_extension_is_a_path_not_a_bundled_name(tmp_path, monkeypatch):
    (tmp_path / "answer_raw").write_text("mine: {query}")
    assert load(str(tmp_path / "answer_raw")).text == "mine: {query}"  # not the bundled answer_raw
    monkeypatch.chdir(tmp_path)
    assert load("./answer_raw").text == "mine: {query}"
    assert load("answer_raw").bundled  # a bare name stays the bundled one
    (tmp_path / "rules").write_text('{"mine": true}')
    assert load_json(str(tmp_path / "rules")) == {"mine": True}
    with pytest.raises(FileNotFoundError, match=r"looked for /absent/memory_user\)"):
        load("/absent/memory_user")


def test_a_copy_of_a_bundled_template_elsewhere_is_not_bundled(tmp_path):
    copy = tmp_path / "memory_user.txt"
    copy.write_text((BUNDLED / "memory_user.txt").read_text())
    assert not load(str(copy)).bundled and load(str(BUNDLED / "memory_user.txt")).bundled
    assert not Template("inline", "text").bundled  # read from no file


def test_the_version_is_a_hash_of_the_text_only(tmp_path):
    bundled = load("answer_raw")
    assert bundled.version == hashlib.sha256(bundled.text.encode()).hexdigest()[:12]
    copy = tmp_path / "elsewhere.txt"
    copy.write_text(bundled.text)
    assert load(str(copy)).version == bundled.version  # same words, same cache keys
    copy.write_text(bundled.text + " ")
    assert load(str(copy)).version != bundled.version  # one edit changes every key that uses it


def test_an_unknown_name_says_where_it_looked():
    with pytest.raises(FileNotFoundError) as err:
        load("no_such_prompt")
    assert str(err.value) == (
        f"prompt template 'no_such_prompt' not found (looked for {BUNDLED / 'no_such_prompt.txt'})"
    )


def test_a_missing_file_says_where_it_looked(tmp_path):
    path = tmp_path / "gone.txt"
    with pytest.raises(
        FileNotFoundError, match=r"prompt template '.*gone\.txt' not found \(looked for .*gone\.txt\)"
    ):
        load(str(path))


def test_a_folder_is_not_a_template(tmp_path):
    folder = tmp_path / "prompts.d"
    folder.mkdir()
    with pytest.raises(FileNotFoundError, match="not found"):
        load(str(folder))


def test_json_rules_load_by_name_or_path(tmp_path):
    rules = load_json("judge_longmemeval_rules")
    assert rules == json.loads((BUNDLED / "judge_longmemeval_rules.json").read_text())
    assert {"default", "temporal-reasoning", "knowledge-update", "abstention"} <= set(rules)
    path = tmp_path / "rules.json"
    path.write_text(json.dumps({"default": "say yes"}))
    assert load_json(str(path)) == {"default": "say yes"}


def test_unknown_json_rules_say_where_they_looked_and_what_is_bundled():
    with pytest.raises(FileNotFoundError, match="no_such_rules.json") as err:
        load_json("no_such_rules")
    assert str(err.value).startswith("prompt resource 'no_such_rules' not found (looked for ")
    assert "judge_longmemeval_rules" in str(err.value)  # the names one could have meant


# A template in the paper's convention (App. G: "Braced expressions such as {query} are runtime
# placeholders"): a JSON example in single braces beside the placeholders. Our own text, not the paper's.
PAPER_STYLE_USER = """Return one JSON array, one object per message:
[
{
"op": "KEEP | DROP",
"compressed_content": "",
"reason": "a few words"
}
]
Query Time: {query_time}
Query: {query}
{window}
"""


def test_a_template_in_the_papers_convention_keeps_its_json_braces(tmp_path):
    path = tmp_path / "listing1_user.txt"
    path.write_text(PAPER_STYLE_USER)
    text = load(str(path)).format(
        n_messages=2, query="Where?", query_time="2023/05/01", window="1. [t] user: hi"
    )
    head = PAPER_STYLE_USER.split("Query Time:")[0]
    assert text == f"{head}Query Time: 2023/05/01\nQuery: Where?\n1. [t] user: hi\n"
    assert '[\n{\n"op": "KEEP | DROP",' in text and "}\n]\n" in text
    # str.format, which the templates were filled with, refuses the JSON example
    with pytest.raises(KeyError):
        PAPER_STYLE_USER.format(n_messages=2, query="Where?", query_time="2023/05/01", window="w")


def test_a_placeholder_the_caller_does_not_fill_names_itself_and_the_fields(tmp_path):
    path = tmp_path / "listing3_text.txt"
    path.write_text("Query: {query}\n# Memory\n{memory_text}\n")  # Listing 3 calls the memory {memory_text}
    with pytest.raises(KeyError) as err:
        load(str(path)).format(memory="m", query="q", query_time="t")
    assert str(err.value) == (
        f"prompt template {path} has the placeholder {{memory_text}}, which is not one of its fields "
        "{memory}, {query}, {query_time}"
    )


def test_prompt_files_in_the_papers_convention_run_through_the_cli(tmp_path):
    """`prompts.*=PATH`, as docs/fidelity.md tells a user to run the paper's listings from their copy: a
    lazymem run on the stand-in, whose memory and answer roles reply with the prompt they were sent (free
    decoding, construct=paper), so the records hold each prompt as sent. Kind: a CLI run."""
    files = {
        "memory_system": "You edit one window of a chat history. Reply with one JSON array.\n",
        "memory_user": PAPER_STYLE_USER,
        "answer_compressed": "Query Time: {query_time}\nQuery: {query}\n# Memory\n{memory}\n# Answer\n",
    }
    for name, text in files.items():
        (tmp_path / f"{name}.txt").write_text(text)
    out = run_cli(
        "task=evaluate",
        "+method@methods.lazymem=lazymem",
        "retrieval=bm25",
        "construct=paper",
        "data.loader.per_type=1",
        "data.loader.abstention=0",
        "data.limit=1",
        *(f"prompts.{name}={tmp_path / name}.txt" for name in files),
        f"hydra.run.dir={tmp_path / 'run'}",
        env={"LAZYMEM_CACHE": str(tmp_path / "cache")},
        standin=True,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (record,) = [json.loads(line) for line in (tmp_path / "run" / "records.jsonl").read_text().splitlines()]
    assert record["status"] == "ok" and record["windows"]
    head = PAPER_STYLE_USER.split("Query Time:")[0]  # the JSON example, single braces kept
    for window in record["windows"]:
        sent = window["raw"]
        assert sent.startswith(f"{head}Query Time: {record['query_time']}\nQuery: {record['question']}\n")
        assert "core_messages:\n" in sent and "{" not in sent.split("Query Time:")[1]
    assert record["answer"] == (
        f"Query Time: {record['query_time']}\nQuery: {record['question']}\n# Memory\n(no memory)\n# Answer"
    )
