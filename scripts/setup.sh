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
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# pip runs only when what it installs changed since the last setup (a full install serves --base too), so a
# rerun (main.sh twice) needs no package index.
STAMP=.venv/.xtag-setup
HASH=$(cat pyproject.toml setup.py scripts/setup.sh | sha256sum | cut -d' ' -f1)
DONE=$(cat "$STAMP" 2>/dev/null || true)
if { [ "$DONE" != "full $HASH" ] && [ "$DONE" != "$MODE $HASH" ]; } || ! .venv/bin/python -c "import xtag.cli" 2>/dev/null
then
  .venv/bin/python -m pip install -q --upgrade pip "setuptools>=70" wheel
  if [ "$MODE" = full ]; then
    .venv/bin/python -m pip install -q "torch==2.13.0"
    .venv/bin/python -m pip install -q -e ".[train,dev,postgres]"
  else
    .venv/bin/python -m pip install -q -e .
  fi
  echo "$MODE $HASH" > "$STAMP"
fi
if [ "$MODE" = full ]; then
  .venv/bin/python -c "import torch, numpy, sklearn; print('xtag env ready: torch', torch.__version__, 'numpy', numpy.__version__, 'sklearn', sklearn.__version__)"
else
  .venv/bin/python -c "import numpy, sklearn; print('xtag env ready (base, no torch): numpy', numpy.__version__, 'sklearn', sklearn.__version__)"
fi
.venv/bin/xtag warm
