"""Vectors that travel with an export (lazymem/agent/vectors.py): what an export carries, what an import keeps
and refuses, and a user moved from SQLite to PostgreSQL with the real encoder that is not embedded again."""

from __future__ import annotations

import base64

import numpy as np
import psycopg
import pytest

from lazymem.agent.inputs import BadInput
from lazymem.agent.vector_blocks import decode as decode_block
from lazymem.agent.vectors import decode, encode, for_export, for_import
from lazymem.data.schema import Message

MODEL = "enc@1"


class KeyedByText:
    """A retriever whose one model stores each message's vector under its text (like `{text}` templates)."""

    def __init__(self, width: int = 3):
        self.width = width
        self.widths_asked = 0

    def vector_keys(self, messages):
        return {MODEL: {f"k:{m.text}" for m in messages}}

    def vector_width(self, model):
        self.widths_asked += 1
        return self.width if model == MODEL else None


class DictCache:
    def __init__(self):
        self.rows: dict[str, dict[str, np.ndarray]] = {}

    def get(self, model, keys):
        return {k: self.rows[model][k] for k in keys if k in self.rows.get(model, {})}

    def put(self, model, items):
        self.rows.setdefault(model, {}).update(items)


def unit(*values: float) -> np.ndarray:
    v = np.array(values, dtype=np.float32)
    return v / np.linalg.norm(v)


def msg(text: str, idx: int = 0) -> Message:
    return Message(idx, "s1", "2025-01-01", "user", text)


def at(i: int) -> str:
    return f"message {i}"


def test_an_export_carries_each_messages_own_vectors_and_an_import_takes_them_back():
    cache = DictCache()
    cache.put(MODEL, {"k:red bike": unit(1, 2, 3), "k:ski": unit(0, 1, 0)})
    cache.put("other-model", {"k:red bike": unit(9, 9, 9)})  # not the retriever's: never exported
    messages = [msg("red bike", 0), msg("not embedded yet", 1), msg("ski", 2)]
    carried = for_export(KeyedByText(), cache, messages)
    assert carried[1] is None and set(carried[0]) == {MODEL} and set(carried[0][MODEL]) == {"k:red bike"}
    assert np.array_equal(decode("x", carried[2][MODEL]["k:ski"]), unit(0, 1, 0))

    kept = for_import(KeyedByText(), messages, carried, at)
    assert set(kept[MODEL]) == {"k:red bike", "k:ski"}
    assert np.array_equal(kept[MODEL]["k:red bike"], unit(1, 2, 3))  # bit for bit


def test_an_import_keeps_only_what_the_target_would_have_stored():
    """Another encoder identity, or the same one over another template (another key), is embedded anew."""
    retriever = KeyedByText()
    carried = [
        {"other-model": {"k:a": encode(unit(1, 0))}},  # another width too: it is never checked
        {MODEL: {"k:rendered-otherwise": encode(unit(1, 0, 0)), "k:b": encode(unit(0, 0, 1))}},
        None,
    ]
    kept = for_import(retriever, [msg("a"), msg("b"), msg("c")], carried, at)
    assert {m: set(v) for m, v in kept.items()} == {MODEL: {"k:b"}}
    assert retriever.widths_asked == 1  # asked once per model, only for a vector it keeps


@pytest.mark.parametrize(
    "field, error",
    [
        ("not an object", r"message 1 \(f:2\): vectors must be an object"),
        ({MODEL: ["a list"]}, r"vectors\['enc@1'\] must be an object"),
        ({MODEL: {"k:b": 17}}, r"vectors\['enc@1'\]\['k:b'\]: a vector must be a base64 string"),
        ({MODEL: {"k:b": "***"}}, "not base64"),
        ({MODEL: {"k:b": base64.b64encode(b"12345").decode()}}, "5 bytes is not a whole number of float32"),
        ({MODEL: {"k:b": encode(unit(1, 0))}}, "2 values, but the encoder makes 3"),
        (
            {MODEL: {"k:b": encode(np.array([1, 1, 1], np.float32))}},
            "length 1.732, but the encoder's vectors",
        ),
        ({MODEL: {"k:b": encode(np.array([np.nan, 0, 0], np.float32))}}, "length nan"),
        ({"other": {"k:b": "***"}}, "not base64"),  # malformed is refused whichever model it names
    ],
)
def test_a_bad_vector_is_refused_naming_the_message_and_the_entry(field, error):
    with pytest.raises(BadInput, match=error):
        for_import(KeyedByText(), [msg("a"), msg("b")], [None, field], lambda i: f"message {i} (f:{i + 1})")


def test_a_user_moved_from_sqlite_to_postgres_with_its_vectors_is_not_embedded_again(
    tmp_path, pg_dsn, monkeypatch
):
    """The real MiniLM retriever: the vectors an export carries are those its indexer stored, the import
    puts them into the PostgreSQL rows before any indexing, and indexing and a query then encode no message
    text. A vector of the wrong width stops the import before its batch is stored."""
    from lazymem import Memory

    texts = ["My bike is red.", "My locker code is 4711.", "I ski in winter.", "ok", "ok"]
    common = ["method=rag", "method.top_k=3", f"paths.cache={tmp_path}"]
    with Memory.from_config([*common, f"agent.dir={tmp_path / 'sqlite'}"]) as source:
        source.add("kim", [{"role": "user", "text": t} for t in texts])
        plain = source.export("kim", vectors=True)
        assert all("vectors" not in m for m in plain)  # not indexed yet: nothing to carry
        source.index_pending()
        lines = source.export("kim", vectors=True)
        assert source.export("kim") == plain  # without `vectors`, as before
    (model,) = {m for line in lines for m in line["vectors"]}
    assert "all-minilm-l6-v2" in model and all(len(line["vectors"][model]) == 1 for line in lines)

    pg = ["agent/store=postgres", f"agent.store.dsn={pg_dsn}", f"agent.dir={tmp_path / 'pg'}"]
    with Memory.from_config([*common, *pg]) as target:
        encoded: list[str] = []
        encoder = target.retriever.retrievers["dense"].encoder
        real_encode = encoder.encode
        monkeypatch.setattr(encoder, "encode", lambda texts: encoded.extend(texts) or real_encode(texts))

        bad = [dict(line, source=f"dump:{n}") for n, line in enumerate(lines, 1)]
        bad[3] = dict(bad[3], vectors={model: {k: encode(unit(1, 0)) for k in bad[3]["vectors"][model]}})
        with pytest.raises(BadInput, match=r"message 4: vectors.*2 values, but the encoder makes 384"):
            target.import_("kim", bad)
        with pytest.raises(KeyError):
            target.export("kim")  # nothing of the refused batch was stored

        moved = [dict(line, source=f"dump:{n}") for n, line in enumerate(lines, 1)]
        assert target.import_("kim", moved).stored == len(texts)
        with psycopg.connect(pg_dsn) as conn:
            blocks = conn.execute("SELECT data FROM blocks WHERE kind = 'vectors'").fetchall()
        stored = [pair for (data,) in blocks for pair in zip(*decode_block(bytes(data)), strict=True)]
        carried = {k: v for line in lines for k, v in line["vectors"][model].items()}
        assert {k: base64.b64encode(v.tobytes()).decode() for k, v in stored} == carried  # "ok" once: one key
        assert len(stored) == len(carried)

        assert target.index_pending() == 1
        assert "red" in target.query("kim", "What colour is my bike?").text
        assert encoded == ["width", "What colour is my bike?"]  # the width probe and the question only
        assert target.export("kim", vectors=True) == [  # each under the key it was imported with
            dict(line, id=m["id"], added=m["added"], source=f"dump:{n}")
            for n, (line, m) in enumerate(zip(lines, target.export("kim"), strict=True), 1)
        ]


def test_an_import_with_vectors_beside_a_running_indexer_embeds_no_message(tmp_path, monkeypatch):
    """The service indexes in the background while an import streams in: each batch's vectors are in the
    user's cache before this process's indexer can read the batch, even when the database is slow between
    the batch's add and the write of its vectors."""
    import asyncio
    import time

    from lazymem import Memory

    texts = [f"Note {n}: I watered the plants." for n in range(400)]
    common = ["method=rag", f"paths.cache={tmp_path}"]
    with Memory.from_config([*common, f"agent.dir={tmp_path / 'source'}"]) as source:
        source.add("kim", [{"role": "user", "text": t} for t in texts])
        source.index_pending()
        lines = [dict(m, source=f"dump:{n}") for n, m in enumerate(source.export("kim", vectors=True))]

    with Memory.from_config([*common, f"agent.dir={tmp_path / 'target'}"]) as target:
        encoded: list[str] = []
        encoder = target.retriever.retrievers["dense"].encoder
        real_encode = encoder.encode
        monkeypatch.setattr(encoder, "encode", lambda texts: encoded.extend(texts) or real_encode(texts))
        real_generations = target.store.generations
        monkeypatch.setattr(
            target.store, "generations", lambda users: time.sleep(0.05) or real_generations(users)
        )

        async def import_while_indexing():
            done = asyncio.Event()

            async def indexer() -> None:
                while not done.is_set():
                    await target.aindex_pending()
                    await asyncio.sleep(0)

            task = asyncio.create_task(indexer())
            try:
                return await target.aimport("kim", lines, batch_size=20)
            finally:
                done.set()
                await task

        assert target._run(import_while_indexing()).stored == len(texts)
        target.index_pending()
        assert encoded == ["width"]
