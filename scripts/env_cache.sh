# Sourced by scripts/setup_*.sh: environments and wheels are built once into a cache outside the checkout,
# under a key of exactly what determines them, and reused by every checkout and CI run on the machine.
# What is tested (the project itself) is never cached: each checkout installs it into its own thin .venv.
#
#   LAZYMEM_ENV_CACHE   where they live (default ~/.cache/lazymem/envs); point it at an empty folder to
#                       measure a set-up from nothing.

ENV_CACHE=${LAZYMEM_ENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lazymem/envs}
mkdir -p "$ENV_CACHE"

# The first 16 hex digits of the sha256 of standard input.
key_of() { sha256sum | cut -c1-16; }

# torch_index PYTHON: where the CPU build torch==$TORCH+cpu comes from: $TORCH_INDEX when set; nothing (pip's
# own sources) when they serve that build, as a local wheel folder or a mirror in pip's configuration may;
# else PyTorch's CPU wheel index. PyPI serves no +cpu builds, only `torch==$TORCH` as a multi-GB CUDA build.
# The check is a dry run of PYTHON's pip: it asks pip's sources, whatever is installed, and installs nothing.
TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu
torch_index() {
  if [ -n "${TORCH_INDEX:-}" ]; then
    echo "$TORCH_INDEX"
  elif ! "$1" -m pip install -q --dry-run --ignore-installed --no-deps "torch==$TORCH+cpu" >/dev/null 2>&1; then
    echo "$TORCH_CPU_INDEX"
  fi
}

# torch_venv DIR [BUILD]: a venv at DIR (Python $PY) with pip upgraded and torch installed FIRST, then
# pinned for every later install through DIR/torch-constraint.txt: a package that asks for torch would
# otherwise make pip resolve a multi-GB CUDA build. BUILD cpu (default): torch==$TORCH+cpu, as above;
# cuda: PyPI's torch==$TORCH, its CUDA build (several GB; from $TORCH_INDEX when set), for a GPU node.
torch_venv() {
  local build=${2:-cpu} spec index
  "$PY" -m venv "$1"
  "$1/bin/python" -m pip install -q --upgrade "pip>=24" wheel
  if [ "$build" = cuda ]; then
    spec="torch==$TORCH"
    index=${TORCH_INDEX:-}
  else
    spec="torch==$TORCH+cpu"
    index=$(torch_index "$1/bin/python")
  fi
  [ -z "$index" ] || echo "${spec/==/ } from $index"
  "$1/bin/python" -m pip install -q "$spec" ${index:+--index-url "$index"}
  echo "$spec" > "$1/torch-constraint.txt"
}

# torch_build MARKER: the torch build a set-up installs: $LAZYMEM_TORCH (cpu or cuda) when set, else the one
# the environment was last built with (MARKER, a torch-constraint.txt: a plain `make run` on a GPU node keeps
# CUDA), else cpu. Exits with a clear error on any other value.
torch_build() {
  local build=${LAZYMEM_TORCH:-}
  if [ -z "$build" ]; then
    build=cpu
    [ -f "$1" ] && ! grep -q "+cpu" "$1" && build=cuda
  fi
  case "$build" in
    cpu | cuda) echo "$build" ;;
    *) echo "LAZYMEM_TORCH=$build: use cpu or cuda" >&2; return 2 ;;
  esac
}

# cached DIR BUILD_FUNCTION: run BUILD_FUNCTION DIR once, under a lock, unless DIR is already complete.
# An interrupted build leaves no .complete marker and is started again from scratch. Of the entries that
# share DIR's kind (the name before its last -KEY), the two used last are kept and older ones deleted
# (an environment is a few GB).
cached() {
  local dir=$1 build=$2
  exec 9>"$dir.lock"
  flock 9
  if [ ! -f "$dir/.complete" ]; then
    rm -rf "$dir"
    "$build" "$dir"
    touch "$dir/.complete"
  fi
  touch "$dir/.used"
  flock -u 9
  exec 9>&-
  local old
  for old in $(ls -1dt "${dir%-*}"-*/.used 2>/dev/null | tail -n +3); do
    old=${old%/.used}
    [ "$old" != "$dir" ] && rm -rf "$old" "$old.lock"
  done
}
