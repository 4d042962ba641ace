#!/usr/bin/env bash
# Create or update .venv-sft: LLaMA-Factory's own environment for task=train_sft (llamafactory-cli runs
# as a subprocess; lazymem never imports it). Idempotent: a stamp keyed on this file skips a rebuild.
# Why its own env: LLaMA-Factory 0.9.5 caps transformers (<=5.6), datasets (<=4.0) and trl (<=0.24),
# which the main env (VERL, sentence-transformers) cannot share.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
VENV=${SFT_VENV:-.venv-sft}
TORCH=${TORCH_VERSION:-2.13.0}
LLAMAFACTORY=${LLAMAFACTORY_VERSION:-0.9.5}
stamp="$VENV/.lazymem-installed"
want="$(sha256sum "$0" | cut -c1-16)-$TORCH-$LLAMAFACTORY"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip="$VENV/bin/python -m pip"
$pip install -q --upgrade "pip>=24" wheel
# torch first and pinned through a constraint, so llamafactory's requirements cannot swap it for a CUDA
# build. Elsewhere set TORCH_INDEX=https://download.pytorch.org/whl/cpu (or a CUDA index on GPU nodes).
$pip install -q "torch==$TORCH" ${TORCH_INDEX:+--index-url "$TORCH_INDEX"}
constraint="$(mktemp)"
trap 'rm -f "$constraint"' EXIT
echo "torch==$TORCH" > "$constraint"
# wandb: sft.yaml reports to W&B (report_to: wandb), into the project of the run that launched it.
$pip install -q -c "$constraint" "llamafactory==$LLAMAFACTORY" wandb
# The torchvision/torchaudio wheels llamafactory pulls in are built against another torch and fail to
# import beside this one; text SFT needs neither. mm_plugin.py imports torchaudio at top level, so a
# stub package stands in for it (only audio inputs would ever call into it).
$pip uninstall -q -y torchvision torchaudio || true
site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
mkdir -p "$site/torchaudio"
cat > "$site/torchaudio/__init__.py" <<'PYEOF'
"""Stub written by lazymem's scripts/setup_sft_env.sh: LLaMA-Factory imports torchaudio at module level
for audio inputs, which text SFT never uses. Install the real torchaudio for audio datasets."""

__version__ = "0.0.0+lazymem.stub"


def __getattr__(name):
    raise ImportError(f"torchaudio is a stub in this environment (asked for torchaudio.{name})")
PYEOF
# DeepSpeed for the ZeRO-2 config in sft.yaml; its build needs the torch above, hence no isolation.
$pip install -q -c "$constraint" --no-build-isolation deepspeed
"$VENV/bin/llamafactory-cli" version >/dev/null
echo "$want" > "$stamp"
