#!/usr/bin/env bash
# Create or update .venv-docs: MkDocs for `make docs` (the site of docs/, built with --strict). The pins are
# the `docs` extra of pyproject.toml. mkdocstrings reads lazymem's docstrings from the source without
# importing it, so this small environment holds nothing of lazymem or its dependencies; it is built once
# into the environment cache (scripts/env_cache.sh), keyed on those pins, and .venv-docs links to it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
VENV=${DOCS_VENV:-.venv-docs}
source scripts/env_cache.sh

requirements=$("$PY" -c '
import tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["docs"]))
')

build_docs() {
  echo "building the docs environment $1 (seconds, once per machine)"
  "$PY" -m venv "$1"
  # shellcheck disable=SC2086
  "$1/bin/python" -m pip install -q $requirements
  "$1/bin/mkdocs" --version >/dev/null
}

key=$( { echo "$requirements"; "$PY" -V; grep -hv "^[[:space:]]*#" scripts/env_cache.sh scripts/setup_docs_env.sh; } | key_of)
DOCS="$ENV_CACHE/docs-$key"
cached "$DOCS" build_docs
if [ "$(readlink "$VENV" 2>/dev/null)" != "$DOCS" ]; then
  rm -rf "$VENV"
  ln -s "$DOCS" "$VENV"
fi
