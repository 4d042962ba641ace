#!/usr/bin/env bash
# Create or update .venv with the CPU environment. Idempotent: reinstalls only when pyproject.toml changed.
# Order matters: the CPU torch wheel goes in FIRST, otherwise pip resolves a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
VENV=${VENV:-.venv}
EXTRAS=${LAZYMEM_EXTRAS:-serve-cpu,rl,rerank,slurm,mem0,dev}
stamp="$VENV/.lazymem-installed"
want="$(sha256sum pyproject.toml | cut -c1-16)-$EXTRAS"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip="$VENV/bin/python -m pip"
$pip install -q --upgrade "pip>=24" wheel
# PyTorch CPU wheel. Elsewhere set TORCH_INDEX=https://download.pytorch.org/whl/cpu to avoid a CUDA build.
$pip install -q torch==2.13.0 ${TORCH_INDEX:+--index-url "$TORCH_INDEX"}
# llama-cpp-python is an sdist; skipping the multimodal part cuts the compile from ~16 to ~11 min.
export CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF}"
$pip install -q -e ".[$EXTRAS]"
echo "$want" > "$stamp"
