#!/usr/bin/env bash
# `make doctor`: can this machine run lazymem? Works even when .venv is missing or broken: it checks .venv
# first and hands over to `lazymem doctor` (lazymem/tasks/doctor.py) only once .venv imports lazymem.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | tr ' ' '\n' | grep -xE 'avx|avx2|fma|f16c|avx512f|amx_tile' | tr '\n' ' ')
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | xargs) (${flags:-flags unknown})"
if [ ! -x "$VENV/bin/python" ]; then
  echo "doctor found problems; fixes:"
  echo "  - $VENV is missing: make setup (scripts/setup_env.sh)"
  exit 1
fi
if ! err=$("$VENV/bin/python" -c "import lazymem.runner" 2>&1); then
  echo "doctor found problems; fixes:"
  echo "  - $VENV is broken ($(tail -n 1 <<<"$err")): rm -rf $VENV && make setup"
  exit 1
fi
exec "$VENV/bin/python" -m lazymem.run doctor "$@"
