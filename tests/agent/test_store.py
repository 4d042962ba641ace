"""The agent store (lazymem/agent/store.py): atomic adds under kill -9, writers in several processes and
threads at once, forget and purge that leave no deleted text in any file."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from lazymem.agent.store import NewMessage, SQLiteStore, UnknownMessages

from agent_helpers import files_containing


def batch(*texts: str) -> list[NewMessage]:
    return [NewMessage("user", t, "2025-01-01", "s") for t in texts]


def test_add_forget_purge(tmp_path):
    store = SQLiteStore(tmp_path)
    ids = store.add("t", "u", batch("a", "b", "c"))
    store.add("t2", "u", batch("other tenant"))
    assert [m.text for m in store.messages("t", "u")] == ["a", "b", "c"]
    with pytest.raises(UnknownMessages):
        store.forget("t", "u", [ids[0], 10**9])
    assert len(store.messages("t", "u")) == 3
    assert store.forget("t", "u", [ids[1]]) == 1
    assert [m.id for m in store.messages("t", "u")] == [ids[0], ids[2]]
    assert store.purge("t", time.time() + 1) == {"u": 2}
    assert store.messages("t", "u") == [] and len(store.messages("t2", "u")) == 1
    store.close()


def test_deleted_text_is_in_no_file(tmp_path):
    store = SQLiteStore(tmp_path)
    store.add("t", "u", batch(*[f"filler {i} " * 20 for i in range(50)]))
    ids = store.add("t", "u", batch("CANARY-store-4242"))
    assert files_containing(b"CANARY-store-4242", tmp_path)
    store.forget("t", "u", ids)
    assert files_containing(b"CANARY-store-4242", tmp_path) == []
    store.close()


_WRITER = """
import sys
from lazymem.agent.store import NewMessage, SQLiteStore
store = SQLiteStore(sys.argv[1])
k = 0
while True:
    store.add("t", "u", [NewMessage("user", f"batch {k} item {i}", "now", "s") for i in range(200)])
    print(k, flush=True)
    k += 1
"""


def test_kill_9_during_adds_leaves_every_batch_whole_or_absent(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_WRITER), str(tmp_path)], stdout=subprocess.PIPE
    )
    for _ in range(5):  # a few batches committed, then killed in the middle of later ones
        proc.stdout.readline()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    conn = sqlite3.connect(tmp_path / "memory.sqlite")
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()
    texts = [m.text for m in SQLiteStore(tmp_path).messages("t", "u")]
    batches = {}
    for t in texts:
        k = int(t.split()[1])
        batches[k] = batches.get(k, 0) + 1
    assert len(batches) >= 5 and set(batches.values()) == {200}
    assert sorted(batches) == list(range(len(batches)))


def test_threads_and_processes_write_at_once_without_lock_errors(tmp_path):
    script = (
        "import sys\nfrom lazymem.agent.store import NewMessage, SQLiteStore\ns = SQLiteStore(sys.argv[1])\n"
    )
    script += "for k in range(100): s.add('t', 'proc', [NewMessage('user', f'p{k}', 'now', 's')])\n"
    other = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)])
    store, errors = SQLiteStore(tmp_path), []

    def writer(u: int) -> None:
        try:
            for k in range(50):
                store.add("t", f"user{u}", batch(f"{u}-{k}"))
                store.messages("t", f"user{u}")
        except Exception as e:  # noqa: BLE001 - the assertion below shows it
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(u,)) for u in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert other.wait(120) == 0 and errors == []
    assert all(len(store.messages("t", f"user{u}")) == 50 for u in range(8))
    assert [m.text for m in store.messages("t", "proc")] == [f"p{k}" for k in range(100)]
