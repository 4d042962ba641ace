#!/usr/bin/env bash
# Create or update .venv-sft: LLaMA-Factory's own environment for task=train_sft (llamafactory-cli runs
# as a subprocess; lazymem never imports it). It holds nothing of this checkout, so it is built once into
# the environment cache (scripts/env_cache.sh), keyed on this script and the versions below, and
# .venv-sft is a link to it.
# Why its own env: LLaMA-Factory 0.9.5 caps transformers (<=5.6), datasets (<=4.0) and trl (<=0.24),
# which the main env (VERL, sentence-transformers) cannot share.
# On a GPU node, LAZYMEM_TORCH=cuda builds it on PyPI's CUDA torch (train_sft's GPUs); the choice sticks to
# .venv-sft until LAZYMEM_TORCH says otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
VENV=${SFT_VENV:-.venv-sft}
TORCH=${TORCH_VERSION:-2.13.0}
LLAMAFACTORY=${LLAMAFACTORY_VERSION:-0.9.5}
source scripts/env_cache.sh

build_sft() {
  echo "building LLaMA-Factory's environment $1 (minutes, once per machine)"
  torch_venv "$1" "$TORCH_BUILD"
  local pip=("$1/bin/python" -m pip install -q) constraint="$1/torch-constraint.txt"
  # wandb: sft.yaml reports to W&B (report_to: wandb), into the project of the run that launched it.
  "${pip[@]}" -c "$constraint" "llamafactory==$LLAMAFACTORY" wandb
  # The torchvision/torchaudio wheels llamafactory pulls in are built against another torch and fail to
  # import beside this one; text SFT needs neither. mm_plugin.py imports torchaudio at top level, so a
  # stub package stands in for it (only audio inputs would ever call into it).
  "$1/bin/python" -m pip uninstall -q -y torchvision torchaudio || true
  local site
  site="$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  mkdir -p "$site/torchaudio"
  cat > "$site/torchaudio/__init__.py" <<'PYEOF'
"""Stub written by lazymem's scripts/setup_sft_env.sh: LLaMA-Factory imports torchaudio at module level
for audio inputs, which text SFT never uses. Install the real torchaudio for audio datasets."""

__version__ = "0.0.0+lazymem.stub"


def __getattr__(name):
    raise ImportError(f"torchaudio is a stub in this environment (asked for torchaudio.{name})")
PYEOF
  # DeepSpeed for the ZeRO-2 config in sft.yaml; its build needs the torch above, hence no isolation.
  "${pip[@]}" -c "$constraint" --no-build-isolation deepspeed
  "$1/bin/llamafactory-cli" version >/dev/null
}

TORCH_BUILD=$(torch_build "$VENV/torch-constraint.txt")
key=$( { echo "torch==$TORCH $TORCH_BUILD llamafactory==$LLAMAFACTORY"; "$PY" -V; grep -hv "^[[:space:]]*#" scripts/env_cache.sh scripts/setup_sft_env.sh; } | key_of)
SFT="$ENV_CACHE/sft-$key"
cached "$SFT" build_sft
if [ "$(readlink "$VENV" 2>/dev/null)" != "$SFT" ]; then
  rm -rf "$VENV"
  ln -s "$SFT" "$VENV"
fi
