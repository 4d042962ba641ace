#!/usr/bin/env bash
# GPU nodes: build the serving environment (.venv-gpu-serve: vLLM 0.32, the series the CPU rehearsal runs)
# and the RL environment (.venv-gpu-rl: verl[vllm]==0.9.1 with the torch, vLLM and transformers it pins,
# lazymem installed from this checkout, then flash-attn built against that torch) with the pins in
# constraints/gpu-*.txt. CUDA wheels: several GB each; flash-attn compiles with nvcc (CUDA toolkit on PATH),
# which can take an hour: MAX_JOBS=N bounds its parallel jobs and memory.
#   bash scripts/setup_gpu_env.sh [serve] [rl]      (default: both; GPU_VENV_DIR=DIR puts them under DIR)
# Then VLLM_PYTHON=.venv-gpu-serve/bin/python (the default wherever llm.common.vllm.device is cuda) and
# train.grpo.python=.venv-gpu-rl/bin/python (or LAZYMEM_RL_PYTHON); `lazymem doctor`, the jobs' preflight
# and `make gpu-check` check them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
source scripts/gpu_envs.sh
envs=("$@")
[ ${#envs[@]} -gt 0 ] || envs=(serve rl)
for env in "${envs[@]}"; do
  [ -n "${GPU_ENVS[$env]:-}" ] || { echo "unknown environment '$env' (serve | rl)" >&2; exit 2; }
  venv="${GPU_VENV_DIR:-.}/.venv-gpu-$env"
  [ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade "pip>=24" wheel
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip install -q -c "constraints/gpu-$env.txt" ${GPU_ENVS[$env]}
  if [ "$env" = rl ]; then
    "$venv/bin/python" -m pip install -q -c "constraints/gpu-$env.txt" -e ".[rl]"
  fi
  if [ -n "${GPU_BUILDS[$env]:-}" ]; then
    echo "$env: building ${GPU_BUILDS[$env]} against $venv's torch (nvcc; up to an hour)"
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install -q $GPU_BUILD_TOOLS
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install -q --no-build-isolation -c "constraints/gpu-$env.txt" ${GPU_BUILDS[$env]}
  fi
  echo "$env: $venv/bin/python"
done
