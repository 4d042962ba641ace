"""A user's blocks in the user's own folder (lazymem/agent/local_blocks.py): read all or some, write in one
transaction (None deletes, replace keeps only what is given), no file made by a read, and no overwritten
block left readable in the file."""

from __future__ import annotations

import sqlite3

import pytest

from lazymem.agent.local_blocks import LocalBlocks


def test_blocks_are_read_written_deleted_and_replaced(tmp_path):
    blocks = LocalBlocks(tmp_path / "user" / "blocks.sqlite")
    assert blocks.read("vectors", "enc") == {} and blocks.names("vectors") == []
    assert not (tmp_path / "user").exists()  # a read makes no file
    assert blocks.write("vectors", "enc", {0: b"zero", 1: b"one", 2: b"two"}) is True
    assert blocks.write("vectors", "other", {0: b"o"}) and blocks.write("bm25", "enc", {0: b"b"})
    assert blocks.read("vectors", "enc") == {0: b"zero", 1: b"one", 2: b"two"}
    assert blocks.read("vectors", "enc", [2, 0, 7]) == {0: b"zero", 2: b"two"}
    assert blocks.names("vectors") == ["enc", "other"]
    blocks.write("vectors", "enc", {1: None, 2: b"TWO", 3: b"three"})
    assert blocks.read("vectors", "enc") == {0: b"zero", 2: b"TWO", 3: b"three"}
    blocks.write("vectors", "enc", {3: b"3", 5: None}, replace=True)
    assert blocks.read("vectors", "enc") == {3: b"3"}
    assert blocks.read("vectors", "other") == {0: b"o"} and blocks.read("bm25", "enc") == {0: b"b"}
    assert LocalBlocks(tmp_path / "user" / "blocks.sqlite").read("vectors", "enc") == {3: b"3"}  # on disk


def test_a_failed_write_changes_nothing(tmp_path):
    blocks = LocalBlocks(tmp_path / "blocks.sqlite")
    blocks.write("vectors", "enc", {0: b"kept"})
    with pytest.raises(sqlite3.ProgrammingError):  # a value SQLite cannot bind, after the delete ran
        blocks.write("vectors", "enc", {1: object()}, replace=True)
    assert blocks.read("vectors", "enc") == {0: b"kept"}


def test_an_overwritten_block_leaves_no_copy_in_the_files(tmp_path):
    canary = b"canary-local-block-91c2" * 8
    blocks = LocalBlocks(tmp_path / "blocks.sqlite")
    blocks.write("vectors", "enc", {0: canary, 1: b"other" * 50})
    assert any(canary in p.read_bytes() for p in tmp_path.iterdir())
    blocks.write("vectors", "enc", {0: b"rewritten without it"})
    assert [p.name for p in tmp_path.iterdir() if canary in p.read_bytes()] == []


def test_last_names_the_highest_block_and_its_size_and_keep_kinds_drops_the_others(tmp_path):
    blocks = LocalBlocks(tmp_path / "blocks.sqlite")
    assert blocks.last("vectors", "enc") is None and not (tmp_path / "blocks.sqlite").exists()
    blocks.write("vectors", "enc", {0: b"zero", 7: b"seven!", 3: b"x"})
    blocks.write("bm25", "lucene", {0: b"terms of every message" * 4})
    blocks.write("other", "x", {0: b"o"})
    assert blocks.last("vectors", "enc") == (7, 6) and blocks.last("vectors", "none") is None
    blocks.keep_kinds({"vectors"})
    assert blocks.read("bm25", "lucene") == {} and blocks.read("other", "x") == {}
    assert blocks.read("vectors", "enc") == {0: b"zero", 3: b"x", 7: b"seven!"}
    assert [p.name for p in tmp_path.iterdir() if b"terms of every message" in p.read_bytes()] == []
    blocks.keep_kinds(set())
    assert blocks.read("vectors", "enc") == {}
