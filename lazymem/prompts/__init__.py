"""Prompt templates: bundled text files, each overridable by a path in the config.

A template's version is a hash of its text, so editing a prompt changes every cache key that uses it.
A template's placeholders are `{name}` ({query}, {window}, ...), as in the paper's listings (App. G); every
other brace is literal, so a JSON example with single braces needs no escaping, and `{{` / `}}` stand for
one brace each, as in str.format (the bundled templates use them).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

BUNDLED = Path(__file__).resolve().parent
# a doubled brace, or a placeholder: an identifier in single braces
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_]\w*)\}")


class MissingField(KeyError):
    """A template placeholder that its caller gives no value for."""

    def __str__(self) -> str:
        return self.args[0]


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
        """The text with each placeholder `{name}` replaced by its field; a placeholder without a field is
        an error naming the fields there are."""

        def fill(match: re.Match) -> str:
            name = match.group(1)
            if name is None:
                return match.group()[0]  # `{{` or `}}`
            if name not in fields:
                where = self.path or self.name
                raise MissingField(
                    f"prompt template {where} has the placeholder {{{name}}}, which is not one of its fields "
                    f"{', '.join(f'{{{f}}}' for f in sorted(fields))}"
                )
            return str(fields[name])

        return _PLACEHOLDER.sub(fill, self.text)


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
