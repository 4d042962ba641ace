#!/usr/bin/env bash
# GPU nodes: build the serving environment (.venv-gpu-serve: vLLM 0.32, the series the CPU rehearsal runs)
# and the RL environment (.venv-gpu-rl: verl[vllm]==0.9.1 with the torch, vLLM and transformers it pins, and
# lazymem installed from this checkout) with the pins in constraints/gpu-*.txt. CUDA wheels: several GB each.
#   bash scripts/setup_gpu_env.sh [serve] [rl]      (default: both)
# Then llm.common.vllm.python=.venv-gpu-serve/bin/python (or VLLM_PYTHON) and train.grpo.python=
# .venv-gpu-rl/bin/python (or LAZYMEM_RL_PYTHON); `lazymem doctor` and the jobs' preflight check them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
source scripts/gpu_envs.sh
envs=("$@")
[ ${#envs[@]} -gt 0 ] || envs=(serve rl)
for env in "${envs[@]}"; do
  [ -n "${GPU_ENVS[$env]:-}" ] || { echo "unknown environment '$env' (serve | rl)" >&2; exit 2; }
  venv=".venv-gpu-$env"
  [ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade "pip>=24" wheel
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip install -q -c "constraints/gpu-$env.txt" ${GPU_ENVS[$env]}
  if [ "$env" = rl ]; then
    "$venv/bin/python" -m pip install -q -c "constraints/gpu-$env.txt" -e ".[rl]"
  fi
  echo "$env: $venv/bin/python"
done
