#!/usr/bin/env bash
# Create or update .venv, the CPU environment of this checkout, in two layers:
# 1. the dependencies (pyproject.toml's, for EXTRAS) in an environment cached outside the checkout
#    (scripts/env_cache.sh), keyed on the dependency specification, the torch version, the llama.cpp build
#    flags, the Python version and this script; built once per machine (minutes), reused after (seconds);
# 2. .venv itself: a thin venv that sees layer 1 through a .pth file and holds only lazymem, installed
#    editable from this checkout, so it always imports the tree under test.
# Order matters in layer 1: the CPU torch wheel goes in FIRST, otherwise pip resolves a multi-GB CUDA build.
# On a GPU node, LAZYMEM_TORCH=cuda puts PyPI's CUDA build there instead (retrieval=paper_gpu's encoder and
# reranker run in this Python); the choice sticks to .venv until LAZYMEM_TORCH says otherwise.
#
# llama.cpp (llama-cpp-python, an sdist) is built for a CPU baseline, never for the building machine
# (-march=native made a wheel that segfaulted on another CPU): LLAMA_CPU=avx2 (default: any x86-64 with
# AVX2/FMA/F16C, no AVX-512, no AMX) or avx512 (AVX-512 with VNNI/BF16, AMX off); LLAMA_CMAKE_ARGS replaces
# the flags entirely. The wheel is cached under a key of its version and flags.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
VENV=${VENV:-.venv}
EXTRAS=${LAZYMEM_EXTRAS:-serve-cpu,rl,rerank,slurm,mem0,dev}
TORCH=${TORCH_VERSION:-2.13.0}
source scripts/env_cache.sh
TORCH_BUILD=$(torch_build "$(cut -d' ' -f1 "$VENV/.lazymem-deps" 2>/dev/null)/torch-constraint.txt")

case "${LLAMA_CPU:-avx2}" in
  avx2) flags="-DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF" ;;
  avx512) flags="-DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON" ;;
  *) echo "LLAMA_CPU=${LLAMA_CPU}: use avx2 or avx512" >&2; exit 2 ;;
esac
LLAMA_FLAGS=${LLAMA_CMAKE_ARGS:-"-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
-DGGML_F16C=ON -DGGML_AVX_VNNI=OFF $flags -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"}

# pyproject.toml's requirements for EXTRAS, one a line (the project itself is not among them)
requirements="$("$PY" - "$EXTRAS" <<'PYEOF'
import sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
lines = list(project["dependencies"])
for extra in filter(None, sys.argv[1].split(",")):
    lines += project["optional-dependencies"][extra]
print("\n".join(lines))
PYEOF
)"
llama_req=$(grep -E '^llama-cpp-python' <<<"$requirements" || true)
llama_version=${llama_req##*==}

build_llama() {  # a wheelhouse holding one llama-cpp-python wheel built with LLAMA_FLAGS
  echo "building llama-cpp-python $llama_version for a CPU baseline into $1 (minutes, once per machine)"
  echo "  CMAKE_ARGS=$LLAMA_FLAGS"
  CMAKE_ARGS="$LLAMA_FLAGS" "$PY" -m pip wheel -q --no-deps --no-binary llama-cpp-python --no-cache-dir \
    -w "$1" "llama-cpp-python==$llama_version"
  echo "$LLAMA_FLAGS" > "$1/CMAKE_ARGS"
}
find_links=()
if [ -n "$llama_req" ]; then
  wheels="$ENV_CACHE/wheels-llama-cpp-python-$llama_version-$(echo "$LLAMA_FLAGS" | key_of)"
  cached "$wheels" build_llama
  find_links=(--find-links "$wheels" --only-binary llama-cpp-python)
fi

key=$( { echo "$requirements"; echo "torch==$TORCH $TORCH_BUILD"; echo "$LLAMA_FLAGS"; "$PY" -V; grep -hv "^[[:space:]]*#" scripts/env_cache.sh scripts/setup_env.sh; } | key_of)
DEPS="$ENV_CACHE/core-$key"
build_deps() {
  echo "building the dependencies' environment $1 (minutes, once per machine)"
  torch_venv "$1" "$TORCH_BUILD"
  # setuptools: .venv installs lazymem from the checkout without build isolation
  "$1/bin/python" -m pip install -q -c "$1/torch-constraint.txt" "setuptools>=69" "${find_links[@]}" \
    -r <(echo "$requirements")
}
cached "$DEPS" build_deps

# Layer 2: the thin .venv, remade when it points at other dependencies or another checkout, or when
# pyproject.toml changed (entry points, package data). setuptools' note on every editable install (mind
# folders named like the package in the working directory) is silenced; its other warnings still show.
want="$DEPS $PWD $(key_of < pyproject.toml)"
if [ "$(cat "$VENV/.lazymem-deps" 2>/dev/null)" != "$want" ]; then
  echo "$VENV: lazymem from this checkout (editable), its dependencies from $DEPS"
  rm -rf "$VENV"
  "$PY" -m venv --without-pip "$VENV"
  purelib() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
  echo "import site; site.addsitedir('$(purelib "$DEPS/bin/python")')" > "$(purelib "$VENV/bin/python")/_lazymem_deps.pth"
  PYTHONWARNINGS="ignore:Editable installation" "$VENV/bin/python" -m pip install -q --no-deps \
    --no-build-isolation -e .
  echo "$want" > "$VENV/.lazymem-deps"
fi
