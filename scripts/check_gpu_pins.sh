#!/usr/bin/env bash
# Check the GPU environments' pins (constraints/gpu-*.txt) with a dry-run resolve: pip reads the packages'
# metadata and downloads no CUDA wheel. Run it when a constraints file changes; it is not part of the test
# suite (it needs the package index and takes minutes). Exit status non-zero when a set does not resolve.
# GPU_BUILDS (flash-attn) are not resolved here: their metadata comes from a setup.py that imports torch.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
source scripts/gpu_envs.sh
status=0
for env in "${!GPU_ENVS[@]}"; do
  echo "== $env: ${GPU_ENVS[$env]} with constraints/gpu-$env.txt"
  project=()
  [ "$env" = rl ] && project=(".[rl]")  # lazymem and its requirements live in the RL environment too
  # shellcheck disable=SC2086
  if "$PY" -m pip install -q --dry-run --ignore-installed -c "constraints/gpu-$env.txt" ${GPU_ENVS[$env]} \
    "${project[@]}"; then
    echo "$env: resolves"
  else
    echo "$env: does NOT resolve"; status=1
  fi
  [ -z "${GPU_BUILDS[$env]:-}" ] || echo "$env: then built on the GPU node: ${GPU_BUILDS[$env]}"
done
exit $status
