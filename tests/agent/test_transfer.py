"""Bulk import and export (lazymem/agent/transfer.py): a LongMemEval history round-trips through an export
into another store (SQLite to PostgreSQL), LoCoMo keeps its speakers, and an import killed with kill -9
resumes without duplicating or losing a message."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from lazymem.agent.transfer import read_histories
from lazymem.data.schema import DataError

from agent_helpers import ROOT

FIELDS = ("role", "text", "time", "session_id")


def cli(*args: str, tmp, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lazymem.run", *args, f"paths.cache={tmp / 'cache'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        **kw,
    )


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

    pg = (f"agent.dir={tmp_path / 'pg'}", "agent.store.kind=postgres", f"agent.store.dsn={pg_dsn}")
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
    from lazymem.retrieval.embed_cache import EmbeddingCache

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
    assert EmbeddingCache(user_dir).count() == len(texts)  # stored by the import: nothing indexed it

    (model,) = lines[1]["vectors"]
    lines[1]["vectors"] = {model: dict.fromkeys(lines[1]["vectors"][model], "AACAPw==")}  # one float, 1.0
    dump.write_text("".join(json.dumps(m) + "\n" for m in lines))
    capsys.readouterr()
    assert main("import", [str(dump), "--user", "lee", f"agent.dir={tmp_path / 'third'}", cache]) == 1
    error = capsys.readouterr().err
    assert "lazymem import: message 1 (kim.jsonl:2): vectors" in error
    assert "1 values, but the encoder makes 384" in error
    assert main("export", ["nobody", source, cache]) == 1
    assert "lazymem export: unknown user 'nobody'" in capsys.readouterr().err
