"""Bulk import and export (lazymem/agent/transfer.py): a LongMemEval history round-trips through an export
into another store (SQLite to PostgreSQL), LoCoMo keeps its speakers, and an import killed with kill -9
resumes without duplicating or losing a message. A message is skipped only when its whole prefix in its
user's history is stored already, whatever the file is called; every failure is one line on stderr."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lazymem.agent.transfer import read_histories
from lazymem.data.schema import DataError

from agent_helpers import ROOT, cli, free_port, write_jsonl

FIELDS = ("role", "text", "time", "session_id")


def imported(file: Path, store: Path, tmp: Path, *args: str) -> str:
    """`lazymem import FILE --user u` into `store`; its summary line."""
    done = cli("import", str(file), "--user", "u", f"agent.dir={store}", *args, tmp=tmp)
    assert done.returncode == 0, done.stderr
    return done.stderr.splitlines()[-1]


def stored_texts(store: Path, tmp: Path, user: str = "u") -> list[str]:
    exported = cli("export", user, f"agent.dir={store}", tmp=tmp)
    assert exported.returncode == 0, exported.stderr
    return [json.loads(line)["text"] for line in exported.stdout.splitlines()]


def counts(file: Path, stored: int, skipped: int) -> str:
    return f"imported {stored + skipped} messages from {file} ({stored} stored, {skipped} already stored)"


def test_a_longmemeval_history_round_trips_into_another_store(lme_s, tmp_path, pg_dsn):
    users = list(read_histories(lme_s, "longmemeval"))
    user = users[0]
    assert len(users) == 8 and len(user.messages) > 100
    sqlite_dir = tmp_path / "sqlite"
    done = cli("import", str(lme_s), "--format", "longmemeval", f"agent.dir={sqlite_dir}", tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"{user.user_id}: {len(user.messages)} messages" in done.stderr

    exported = cli("export", user.user_id, f"agent.dir={sqlite_dir}", tmp=tmp_path)
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert [{k: m[k] for k in FIELDS} for m in lines] == [{k: m[k] for k in FIELDS} for m in user.messages]
    dump = tmp_path / "export.jsonl"
    dump.write_text(exported.stdout)

    pg = (f"agent.dir={tmp_path / 'pg'}", "agent/store=postgres", f"agent.store.dsn={pg_dsn}")
    assert cli("import", str(dump), *pg, tmp=tmp_path).returncode == 0
    again = cli("export", user.user_id, *pg, tmp=tmp_path)
    moved = [json.loads(line) for line in again.stdout.splitlines()]
    assert [{k: m[k] for k in FIELDS} for m in moved] == [{k: m[k] for k in FIELDS} for m in lines]
    assert min(m["added"] for m in moved) > max(m["added"] for m in lines)  # retention counts from import


def test_locomo_keeps_one_user_per_conversation_and_its_speakers(locomo_file):
    users = list(read_histories(locomo_file, "locomo"))
    assert len(users) == 8 and len({u.user_id for u in users}) == 8
    roles = {m["role"] for m in users[0].messages}
    assert len(roles) == 2 and not roles & {"user", "assistant"}  # the two speakers' names
    first, second = users[0].messages[:2]
    assert first["source"].startswith("c1:") and len(first["source"]) == 35 != second["source"]
    assert first["aliases"] == (f"{locomo_file.name}:{users[0].user_id}:0",)  # what lazymem 0.x named it
    assert users[0].positions[1] == f"{locomo_file} {users[0].user_id} message 1"


def test_a_malformed_line_names_file_line_and_field(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"user_id": "u", "role": "user", "text": "fine"}\n{"role": "user", "text": "who?"}\n')
    with pytest.raises(DataError, match=r"bad.jsonl, record line 2, field 'user_id'"):
        list(read_histories(bad, "jsonl"))
    bad.write_text("{not json\n")
    with pytest.raises(DataError, match="record line 1: not JSON"):
        list(read_histories(bad, "jsonl"))


def test_an_import_killed_with_kill_9_resumes_without_duplicates(tmp_path):
    source = tmp_path / "history.jsonl"
    texts = [("ok" if n % 7 == 0 else f"message {n}") for n in range(30_000)]  # repeated short turns
    source.write_text("".join(json.dumps({"role": "user", "text": t}) + "\n" for t in texts))
    args = [
        sys.executable,
        "-m",
        "lazymem.run",
        "import",
        str(source),
        "--user",
        "u",
        f"agent.dir={tmp_path / 'd'}",
    ]
    proc = subprocess.Popen(args, cwd=ROOT, stderr=subprocess.PIPE, text=True, start_new_session=True)
    progress = [proc.stderr.readline() for _ in range(3)]  # three batches in
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert all(line.startswith("u: ") for line in progress), progress

    assert (
        cli("import", str(source), "--user", "u", f"agent.dir={tmp_path / 'd'}", tmp=tmp_path).returncode == 0
    )
    exported = cli("export", "u", f"agent.dir={tmp_path / 'd'}", tmp=tmp_path).stdout.splitlines()
    assert [json.loads(line)["text"] for line in exported] == texts


def test_export_with_vectors_and_import_move_a_users_vectors_through_the_cli(tmp_path, capsys):
    """`lazymem export --vectors` writes the indexed user's vectors; `lazymem import` stores them in the
    target's embedding cache before any indexing, and a damaged vector stops it with a one-line error.
    (In this process: the subprocess form of both commands is tested above.)"""
    from lazymem import Memory
    from lazymem.agent.transfer import main
    from lazymem.agent.user_retrieval import LocalUserStorage
    from lazymem.agent.vector_blocks import decode

    texts = ["My bike is red.", "I ski in winter.", "My locker code is 4711."]
    cache = f"paths.cache={tmp_path / 'cache'}"
    source = f"agent.dir={tmp_path / 'source'}"
    with Memory.from_config(["method=rag", source, cache]) as memory:
        memory.add("kim", [{"role": "user", "text": t} for t in texts])
        memory.index_pending()
    capsys.readouterr()
    assert main("export", ["kim", "--vectors", source, cache]) == 0
    exported = capsys.readouterr().out
    lines = [json.loads(line) for line in exported.splitlines()]
    assert [m["text"] for m in lines] == texts and all(len(m["vectors"]) == 1 for m in lines)
    dump = tmp_path / "kim.jsonl"
    dump.write_text(exported)

    target = tmp_path / "target"
    assert main("import", [str(dump), f"agent.dir={target}", cache]) == 0
    (user_dir,) = (target / "users").iterdir()
    blocks = LocalUserStorage(user_dir).blocks()
    stored = [
        key
        for name in blocks.names("vectors")
        for data in blocks.read("vectors", name).values()
        for key in decode(data)[0]
    ]
    assert len(stored) == len(texts)  # stored by the import: nothing indexed it

    (model,) = lines[1]["vectors"]
    lines[1]["vectors"] = {model: dict.fromkeys(lines[1]["vectors"][model], "AACAPw==")}  # one float, 1.0
    dump.write_text("".join(json.dumps(m) + "\n" for m in lines))
    capsys.readouterr()
    assert main("import", [str(dump), "--user", "lee", f"agent.dir={tmp_path / 'third'}", cache]) == 1
    error = capsys.readouterr().err
    assert f"lazymem import: {dump} line 2: vectors" in error
    assert "1 values, but the encoder makes 384" in error
    assert main("export", ["nobody", source, cache]) == 1
    assert "lazymem export: unknown user 'nobody'" in capsys.readouterr().err


# ---- which messages an import stores: keys chained over each user's history, whatever the file's name


def test_two_files_with_one_name_in_two_folders_are_both_stored(tmp_path):
    day1 = write_jsonl(tmp_path / "day1" / "history.jsonl", ["I moved to Lyon.", "ok"])
    day2 = write_jsonl(tmp_path / "day2" / "history.jsonl", ["I adopted a cat.", "ok"])
    store = tmp_path / "store"
    assert imported(day1, store, tmp_path) == counts(day1, 2, 0)
    assert imported(day2, store, tmp_path) == counts(day2, 2, 0)
    assert stored_texts(store, tmp_path) == ["I moved to Lyon.", "ok", "I adopted a cat.", "ok"]


def test_a_file_imported_twice_is_stored_once(tmp_path):
    source = write_jsonl(tmp_path / "history.jsonl", ["one", "two", "three"])
    store = tmp_path / "store"
    assert imported(source, store, tmp_path) == counts(source, 3, 0)
    assert imported(source, store, tmp_path) == counts(source, 0, 3)
    assert stored_texts(store, tmp_path) == ["one", "two", "three"]


def test_identical_lines_of_one_file_are_all_stored(tmp_path):
    source = write_jsonl(tmp_path / "history.jsonl", ["ok", "ok", "sure", "ok"], time="2024-05-01 10:00")
    store = tmp_path / "store"
    assert imported(source, store, tmp_path) == counts(source, 4, 0)
    assert stored_texts(store, tmp_path) == ["ok", "ok", "sure", "ok"]


def test_a_file_appended_to_and_imported_again_stores_only_the_new_lines(tmp_path):
    source = write_jsonl(tmp_path / "history.jsonl", ["one", "ok"])
    store = tmp_path / "store"
    imported(source, store, tmp_path)
    write_jsonl(source, ["ok", "three"], mode="a")
    assert imported(source, store, tmp_path) == counts(source, 2, 2)
    assert stored_texts(store, tmp_path) == ["one", "ok", "ok", "three"]


def test_a_renamed_file_imported_again_adds_nothing(tmp_path):
    source = write_jsonl(tmp_path / "history.jsonl", ["one", "two"])
    store = tmp_path / "store"
    imported(source, store, tmp_path)
    renamed = tmp_path / "archive" / "2024-05.jsonl"
    renamed.parent.mkdir()
    shutil.move(source, renamed)
    assert imported(renamed, store, tmp_path) == counts(renamed, 0, 2)
    assert stored_texts(store, tmp_path) == ["one", "two"]


def test_two_exports_that_share_their_first_messages_share_them_in_the_store(tmp_path):
    """Exports of two stores whose user began alike carry other ids and import times; the messages they
    share count by what the user said, so only the rest of the second is new."""
    dated = {"time": "2024-05-01 10:00", "session_id": "s1"}
    exports = []
    for name, last in (("a", "I ski."), ("b", "I swim.")):
        source = write_jsonl(tmp_path / f"{name}.jsonl", ["hi", "ok", last], **dated)
        imported(source, tmp_path / name, tmp_path)
        exported = cli("export", "u", f"agent.dir={tmp_path / name}", tmp=tmp_path)
        exports.append(tmp_path / f"{name}-export.jsonl")
        exports[-1].write_text(exported.stdout)
    target = tmp_path / "target"
    assert imported(exports[0], target, tmp_path) == counts(exports[0], 3, 0)
    assert imported(exports[1], target, tmp_path) == counts(exports[1], 1, 2)
    assert stored_texts(target, tmp_path) == ["hi", "ok", "I ski.", "I swim."]


def test_a_store_written_with_the_old_file_and_line_keys_gets_nothing_twice(tmp_path):
    """lazymem 0.x keyed an imported message by FILE_NAME:LINE; each message now carries that key as an
    alias, so rerunning such an import into such a store adds nothing."""
    from lazymem import Memory

    texts = ["one", "ok", "ok"]
    source = write_jsonl(tmp_path / "history.jsonl", texts)
    store = tmp_path / "store"
    config = ["method=rag", f"agent.dir={store}", f"paths.cache={tmp_path / 'cache'}"]
    with Memory.from_config(config) as memory:
        old = [{"role": "user", "text": t, "source": f"history.jsonl:{n}"} for n, t in enumerate(texts, 1)]
        assert memory.import_("u", old).stored == 3
    assert imported(source, store, tmp_path) == counts(source, 0, 3)
    assert stored_texts(store, tmp_path) == texts


def test_the_summary_counts_each_user_and_all(tmp_path):
    source = tmp_path / "two.jsonl"
    lines = [{"user_id": user, "text": text} for user, text in (("kim", "a"), ("lee", "b"), ("lee", "c"))]
    source.write_text("".join(json.dumps({"role": "user", **m}) + "\n" for m in lines))
    store = f"agent.dir={tmp_path / 'store'}"
    assert cli("import", str(source), store, tmp=tmp_path).returncode == 0
    lines.append({"user_id": "kim", "text": "d"})  # kim's history goes on after lee's
    source.write_text("".join(json.dumps({"role": "user", **m}) + "\n" for m in lines))
    done = cli("import", str(source), store, tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    summary = [line for line in done.stderr.splitlines() if "imported" in line]
    assert summary == [
        "kim: imported 1 messages (0 stored, 1 already stored)",
        "lee: imported 2 messages (0 stored, 2 already stored)",
        "kim: imported 1 messages (1 stored, 0 already stored)",
        counts(source, 1, 3),
    ]
    assert stored_texts(tmp_path / "store", tmp_path, "kim") == ["a", "d"]


# ---- every failure is one line on stderr that says what to do


def one_line_error(done: subprocess.CompletedProcess, command: str = "import", status: int = 1) -> str:
    """The failure's line: the last on stderr, the only one that names the command, no traceback."""
    assert done.returncode == status, done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith(f"lazymem {command}")]
    assert errors == done.stderr.splitlines()[-1:], done.stderr
    return errors[0]


def test_a_bad_message_names_its_file_line_field_and_what_was_stored_before_it(tmp_path):
    source = write_jsonl(tmp_path / "day2" / "history.jsonl", ["one", "two", "three"])
    write_jsonl(source, [""], mode="a")
    batches = "agent.limits.max_messages_per_add=2"
    done = cli("import", str(source), "--user", "u", f"agent.dir={tmp_path / 'store'}", batches, tmp=tmp_path)
    error = one_line_error(done)
    assert error.startswith(f"lazymem import: {source} line 4: text must be a non-empty string")
    assert "2 messages of this import stored before it" in error and "run the import again" in error
    assert done.stderr.splitlines()[0] == "u: 2 messages"  # the first batch, kept


def test_a_misspelt_field_stops_the_import_instead_of_being_dropped(tmp_path):
    """A line's `session` or `timestamp` is no field of a message: stored without it, the message would
    silently lose its session and time."""
    source = tmp_path / "misspelt.jsonl"
    line = {"role": "user", "text": "hello", "session": "s1", "timestamp": "2020-01-01"}
    source.write_text(json.dumps(line) + "\n")
    done = cli("import", str(source), "--user", "u", f"agent.dir={tmp_path / 'store'}", tmp=tmp_path)
    error = one_line_error(done)
    assert error.startswith(f"lazymem import: {source} line 1: unknown fields ['session', 'timestamp']")
    assert cli("export", "u", f"agent.dir={tmp_path / 'store'}", tmp=tmp_path).returncode == 1  # nothing


def test_a_missing_file_fails_fast_before_the_config_is_composed(tmp_path):
    missing = tmp_path / "nope.jsonl"
    done = cli("import", str(missing), "retrieval=nonexistent", tmp=tmp_path)  # would fail if composed
    assert one_line_error(done) == f"lazymem import: no such file: {missing}; check the path"


LATIN_1 = b'{"role": "user", "text": "ok"}\n{"role": "user", "text": "caf\xe9"}\n'
E_ACUTE = LATIN_1.index(0xE9)  # "é" in Latin-1: not UTF-8


# what each case's line says ({file}: the file given)
CANNOT_RUN = {
    "folder": "{file} is a folder; pass one file in it",
    "latin-1": f"file {{file}}, record line 2: not UTF-8 text (byte {E_ACUTE} of the file)",
    "longmemeval latin-1": f"file {{file}}: not UTF-8 text: invalid continuation byte at byte {E_ACUTE}",
    "unreadable": "cannot read {file}: permission denied; check its permissions",
    "unknown key": "Could not override 'agent.nope'. To append to your config use +agent.nope=1",
    "unknown config": "no config 'retrieval/nonexistent'; choose one of bm25, dense, hybrid,",
    "bad override": "bad configuration: no viable alternative at input '[a'",
    "malformed line": "file {file}, record line 1, field 'user_id': missing (or pass --user)",
    "nested too deep": "file {file}, record line 2: JSON nested too deep; fix the file",
}


@pytest.mark.parametrize("case", CANNOT_RUN)
def test_an_import_that_cannot_run_says_why_in_one_line(case, tmp_path):
    source = tmp_path / "history.jsonl"
    source.write_bytes(LATIN_1)
    args, prefix = ["--user", "u"], ()
    if case == "folder":
        source = tmp_path
    elif case == "longmemeval latin-1":
        args = ["--format", "longmemeval"]
    elif case == "unreadable":
        source.chmod(0)
        if os.geteuid() == 0:  # root reads any file unless it drops the capability to
            if shutil.which("setpriv") is None:
                pytest.skip("running as root without setpriv: every file is readable")
            prefix = ("setpriv", "--bounding-set=-dac_override,-dac_read_search", "--")
    elif case == "unknown key":
        args.append("agent.nope=1")
    elif case == "unknown config":
        args.append("retrieval=nonexistent")
    elif case == "bad override":
        args.append("agent.dir=[a")
    elif case == "malformed line":
        args = []
        source.write_text('{"role": "user", "text": "whose?"}\n')
    elif case == "nested too deep":
        source.write_text('{"role": "user", "text": "fine"}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    done = cli("import", str(source), *args, f"agent.dir={tmp_path / 'store'}", tmp=tmp_path, prefix=prefix)
    assert CANNOT_RUN[case].format(file=source) in one_line_error(done)


def test_an_unknown_format_is_a_one_line_usage_error(tmp_path):
    source = write_jsonl(tmp_path / "history.jsonl", ["one"])
    error = one_line_error(cli("import", str(source), "--format", "xml", tmp=tmp_path), status=2)
    assert "invalid choice: 'xml'" in error and "see lazymem import --help" in error


def test_a_database_that_is_down_says_to_check_the_dsn(tmp_path):
    source = write_jsonl(tmp_path / "history.jsonl", ["one"])
    down = [
        "agent/store=postgres",
        f"agent.store.dsn=postgresql://lazymem@127.0.0.1:{free_port()}/lazymem",
        "agent.store.wait_s=1",
        f"agent.dir={tmp_path / 'pg'}",
    ]
    start = time.monotonic()
    for command, arg in (("import", str(source)), ("export", "u")):
        args = (command, arg, "--user", "u") if command == "import" else (command, arg)
        error = one_line_error(cli(*args, *down, tmp=tmp_path), command)
        assert "check agent.store.dsn" in error
    assert time.monotonic() - start < 60


def test_an_export_of_an_unknown_user_says_to_check_the_id(tmp_path):
    error = one_line_error(cli("export", "nobody", f"agent.dir={tmp_path / 'store'}", tmp=tmp_path), "export")
    assert error == (
        "lazymem export: unknown user 'nobody': no stored messages; check the user id and --tenant"
    )


def test_the_issues_reproduction_through_the_import_command(tmp_path):
    """Import a 3-line file without times, forget its second message, import the file again: nothing comes
    back. The user's own export (which fills in time and session) imports as a no-op, and an export taken
    before the forget brings nothing back either."""
    store = tmp_path / "store"
    file = write_jsonl(tmp_path / "chat.jsonl", ["I live in Porto.", "My PIN is 4711.", "I like jazz."])

    def run(*args: str) -> str:
        done = cli(*args, f"agent.dir={store}", tmp=tmp_path)
        assert done.returncode == 0, done.stderr
        return done.stderr.splitlines()[-1] if args[0] == "import" else done.stdout

    assert run("import", str(file), "--user", "u").endswith("(3 stored, 0 already stored)")
    before = tmp_path / "before.jsonl"
    before.write_text(run("export", "u"))
    exported = [json.loads(line) for line in before.read_text().splitlines()]
    assert all(m["source"].startswith("c1:") and m["time"] for m in exported)
    assert run("import", str(before)).endswith("(0 stored, 3 already stored)")  # its own export: a no-op

    from lazymem import Memory

    with Memory.from_config(["method=rag", f"agent.dir={store}", f"paths.cache={tmp_path}"]) as memory:
        assert memory.forget("u", [exported[1]["id"]]) == 1
    assert run("import", str(file), "--user", "u").endswith("(0 stored, 2 already stored, 1 forgotten)")
    assert run("import", str(before)).endswith("(0 stored, 2 already stored, 1 forgotten)")
    after = [json.loads(line)["text"] for line in run("export", "u").splitlines()]
    assert after == ["I live in Porto.", "I like jazz."]
