#!/usr/bin/env bash
# Create .venv with xtag, then compile the Numba kernels into numba's cache (`xtag warm`), so the first train
# and the first serve do not wait for the JIT. Installs no system package (scripts/test.sh adds Chromium).
#   bash scripts/setup.sh          everything: the training extras (torch) and the test tools (scripts/test.sh)
#   bash scripts/setup.sh --base   what the main job needs (XR-Linear train, export, evaluate, serve): no torch,
#                                  about a third of the size, and fewer packages for a local mirror to hold
# Torch is pinned to the CPU wheel first: a bare "torch" requirement would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=full
[ "${1:-}" = --base ] && MODE=base
# XTAG_INSTALL=plain: `pip install .` (a copy in site-packages; reinstall after editing) instead of the editable
# `pip install -e .`; the tests run on either (tests/install_mode.py).
EDITABLE=-e
case "${XTAG_INSTALL:-editable}" in
  editable) ;;
  plain) EDITABLE= ;;
  *) echo "setup.sh: XTAG_INSTALL=${XTAG_INSTALL} is neither editable nor plain" >&2; exit 2 ;;
esac
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
TORCH=2.13.0
# Torch's CPU build: PyPI's Linux wheel of torch is the CUDA build (several GB). The CPU wheel is taken from
# $XTAG_TORCH_WHEELS, the pip find-links folders ($PIP_FIND_LINKS) or /opt/wheels when one there fits this Python;
# pip then needs no index for it. Where none is found, one line says so and what to do, and pip decides (root on
# these machines has /opt/wheels in its pip configuration; another user does not: issue 38 saw a 5.9 GB .venv).
install_cpu_torch() {
  local tag dir wheel=""
  if .venv/bin/python -c "import torch, sys; sys.exit(torch.__version__ != '$TORCH+cpu')" 2>/dev/null; then
    return 0
  fi
  tag=$(.venv/bin/python -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
  for dir in ${XTAG_TORCH_WHEELS:-} ${PIP_FIND_LINKS:-} /opt/wheels; do
    wheel=$(ls "$dir"/torch-"$TORCH"+cpu-"$tag"-"$tag"-*"$(uname -m)".whl 2>/dev/null | head -n 1 || true)
    [ -n "$wheel" ] && break
  done
  if [ -n "$wheel" ]; then
    .venv/bin/python -m pip install -q "$wheel"
  else
    echo "setup.sh: no CPU wheel of torch $TORCH for $tag found (XTAG_TORCH_WHEELS, PIP_FIND_LINKS, /opt/wheels):" \
      "pip installs torch==$TORCH as its index offers it, on Linux x86_64 the CUDA build (several GB). To avoid it," \
      "put torch-$TORCH+cpu-$tag-*.whl in a folder and set XTAG_TORCH_WHEELS to it, or set PIP_INDEX_URL to" \
      "PyTorch's CPU wheel index." >&2
    .venv/bin/python -m pip install -q "torch==$TORCH"
  fi
}
# pip runs only when what it installs changed since the last setup (a full install serves --base too), so a
# rerun (main.sh twice) needs no package index.
STAMP=.venv/.xtag-setup
# a plain install is a copy: it is made again whenever the package's files changed
ROOTS=$(.venv/bin/python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["tool"]["xtag"]["package-roots"])')
sources() { [ -z "$EDITABLE" ] && find xtag $ROOTS -type f -not -path '*/__pycache__/*' | sort | xargs cat; true; }
HASH=$( (cat pyproject.toml setup.py scripts/setup.sh; echo "${XTAG_INSTALL:-editable}"; sources) | sha256sum | cut -d' ' -f1)
DONE=$(cat "$STAMP" 2>/dev/null || true)
if { [ "$DONE" != "full $HASH" ] && [ "$DONE" != "$MODE $HASH" ]; } || ! .venv/bin/python -c "import xtag.cli" 2>/dev/null
then
  .venv/bin/python -m pip install -q --upgrade pip "setuptools>=70" wheel
  if [ "$MODE" = full ]; then
    install_cpu_torch
    .venv/bin/python -m pip install -q $EDITABLE ".[train,dev,postgres,ray]"
  else
    .venv/bin/python -m pip install -q $EDITABLE .
  fi
  echo "$MODE $HASH" > "$STAMP"
fi
if [ "$MODE" = full ]; then
  .venv/bin/python -c "import torch, numpy, sklearn; print('xtag env ready: torch', torch.__version__, 'numpy', numpy.__version__, 'sklearn', sklearn.__version__)"
else
  .venv/bin/python -c "import numpy, sklearn; print('xtag env ready (base, no torch): numpy', numpy.__version__, 'sklearn', sklearn.__version__)"
fi
.venv/bin/xtag warm
