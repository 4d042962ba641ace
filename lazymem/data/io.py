"""Reading benchmark files: one place that turns OS and JSON failures into DataError."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from lazymem.data.schema import DataError


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_json(path: str | Path) -> object:
    path = Path(path)
    if not path.exists():
        raise DataError(path, None, None, "no such file")
    if path.is_dir():
        raise DataError(path, None, None, "is a directory, expected a JSON file")
    if path.stat().st_size == 0:
        raise DataError(path, None, None, "the file is empty, expected JSON")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        # the parser ran out of text (positions count characters of the decoded text, not bytes)
        ran_out = e.pos >= len(e.doc.rstrip()) or e.msg.startswith("Unterminated string")
        hint = " (the file looks truncated)" if ran_out else ""
        raise DataError(
            path, None, None, f"not valid JSON at line {e.lineno}, column {e.colno}: {e.msg}{hint}"
        ) from None
    except UnicodeDecodeError as e:
        raise DataError(path, None, None, f"not UTF-8 text: {e.reason} at byte {e.start}") from None


def require(record: dict, key: str, kind: type | tuple[type, ...], path, record_id) -> object:
    """`record[key]`, checked to exist and to be of `kind`; otherwise a DataError naming all three."""
    if not isinstance(record, dict):
        raise DataError(path, record_id, None, f"expected a JSON object, got {type(record).__name__}")
    if key not in record:
        raise DataError(path, record_id, key, "missing")
    value = record[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise DataError(path, record_id, key, f"expected {names}, got {type(value).__name__}")
    return value
