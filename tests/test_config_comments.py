"""Every config key keeps its comment: a comment line directly above it, or one at the end of its line.

Only leaf keys (`key: value`) are checked; a key that opens a mapping (`key:` with nothing after it) leaves
the comments to its children. `defaults:` lists, list items, `_target_`-style keys and the body of block
scalars are skipped."""

from __future__ import annotations

import re

from lazymem.conf import CONF_DIR

# `key: value` or `key:` after the end-of-line comment is cut off; the key plain or quoted
KEY_LINE = re.compile(r"""^(?P<indent>\s*)(?P<key>"[^"]*"|'[^']*'|[^\s#'"][^:]*?):(?:\s+(?P<value>.*))?$""")
BLOCK_SCALAR = re.compile(r"^[|>][-+0-9]*$")


def split_comment(line: str) -> tuple[str, bool]:
    """The line without its end-of-line comment, and whether it had one. A `#` starts a comment only at the
    start of the line or after whitespace, and never inside a quoted scalar."""
    quote = None
    i = 0
    while i < len(line):
        ch = line[i]
        if quote:
            if quote == '"' and ch == "\\":
                i += 1  # an escaped character, `\"` included
            elif ch == quote:
                quote = None  # a doubled '' inside single quotes closes and reopens: same result
        elif ch in "'\"" and line[:i].rstrip()[-1:] in ("", ":", "-", "[", "{", ","):
            quote = ch  # a quote opens a scalar only where a scalar can start (not `don't`)
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), True
        i += 1
    return line.rstrip(), False


def uncommented_keys(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every leaf key in the YAML text that has no comment."""
    lines = text.splitlines()
    found = []
    skip_deeper_than = None  # indentation of a `defaults:` or block-scalar key whose body is skipped
    for n, line in enumerate(lines, 1):
        content, commented = split_comment(line)
        if not content.strip():
            continue
        indent = len(content) - len(content.lstrip())
        if skip_deeper_than is not None:
            if indent > skip_deeper_than or content.lstrip().startswith("- "):
                continue
            skip_deeper_than = None
        match = KEY_LINE.match(content)
        if not match or content.lstrip().startswith("- "):
            continue
        key, value = match["key"].strip("'\""), match["value"] or ""
        if key == "defaults" or BLOCK_SCALAR.match(value):
            skip_deeper_than = indent
        if key == "defaults" or key.startswith("_") or not value:
            continue
        above = lines[n - 2].strip() if n > 1 else ""
        if not (commented or above.startswith("#")):
            found.append((n, line.strip()))
    return found


def test_every_config_key_has_a_comment():
    offenders = [
        f"{path.relative_to(CONF_DIR.parent)}:{n}: {line}"
        for path in sorted(CONF_DIR.rglob("*.yaml"))
        for n, line in uncommented_keys(path.read_text())
    ]
    assert not offenders, "config keys without a comment:\n" + "\n".join(offenders)


def test_checker_finds_a_bare_key_and_accepts_both_comment_forms():
    text = "\n".join(
        [
            "defaults:",
            "  - llm: cpu",
            "_target_: lazymem.Thing",
            "# what a is",
            "a: 1",
            "b: 2  # what b is",
            "c: 3",
            "d: 'a # in quotes is no comment'",
            'e: "x\\" # still quoted"  # but this one is',
            "group:",
            "  # nested, comment above",
            "  f: x",
            "  g: [1, 2]",
            "items:",
            "  - h: 1",
            "doc: |",
            "  body: is not a key",
            "i: don't # the apostrophe opens no quote",
        ]
    )
    bare = [n for n, _ in uncommented_keys(text)]
    assert bare == [7, 8, 13, 16]  # c, d (its `#` is quoted), g and the block scalar's key
