"""Prompt templates: bundled text files, each overridable by a path in the config.

A template's version is a hash of its text, so editing a prompt changes every cache key that uses it.
Templates use str.format fields ({query}, {window}, ...); literal braces are doubled.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

BUNDLED = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Template:
    name: str
    text: str
    path: Path | None = None  # the file it was read from

    @property
    def bundled(self) -> bool:
        """Shipped with lazymem (our own words), not a file of the user's."""
        return self.path is not None and self.path.parent == BUNDLED

    @property
    def version(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:12]

    def format(self, **fields) -> str:
        return self.text.format(**fields)


def load(name_or_path: str) -> Template:
    """A bundled template by name (`memory_user`) or any file by path."""
    path = _bundled(name_or_path, ".txt")
    if not path.is_file():
        raise FileNotFoundError(f"prompt template {name_or_path!r} not found (looked for {path})")
    return Template(path.stem, path.read_text(), path.resolve())


def load_json(name_or_path: str) -> dict:
    """A bundled JSON resource by name or any JSON file by path; a missing one says where it looked."""
    path = _bundled(name_or_path, ".json")
    if not path.is_file():
        bundled = sorted(p.stem for p in BUNDLED.glob("*.json"))
        raise FileNotFoundError(
            f"prompt resource {name_or_path!r} not found (looked for {path}; bundled: {bundled})"
        )
    return json.loads(path.read_text())


def _bundled(name_or_path: str, suffix: str) -> Path:
    """A bare name (no folder, no extension) is a bundled resource; anything else is a path as given
    (`./my_prompt` or `/srv/prompts/answer` too, which have no extension)."""
    path = Path(name_or_path)
    if path.suffix or "/" in name_or_path or os.sep in name_or_path:
        return path
    return BUNDLED / f"{name_or_path}{suffix}"
