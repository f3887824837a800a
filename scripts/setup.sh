#!/usr/bin/env bash
# Create .venv with xtag and its training/test extras, then compile the Numba kernels into numba's cache
# (`xtag warm`), so the first train and the first serve do not wait for the JIT. Installs no system package
# (scripts/test.sh adds Chromium for the browser test). Torch is pinned to the CPU wheel first: a bare
# "torch" requirement would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# pip runs only when what it installs changed since the last setup: a rerun (main.sh twice) needs no index.
STAMP=.venv/.xtag-setup
WANT=$(cat pyproject.toml setup.py scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ] || ! .venv/bin/python -c "import xtag.cli" 2>/dev/null; then
  .venv/bin/python -m pip install -q --upgrade pip "setuptools>=70" wheel
  .venv/bin/python -m pip install -q "torch==2.13.0"
  .venv/bin/python -m pip install -q -e ".[train,dev]"
  echo "$WANT" > "$STAMP"
fi
.venv/bin/python -c "import torch, numpy, sklearn; print('xtag env ready: torch', torch.__version__, 'numpy', numpy.__version__, 'sklearn', sklearn.__version__)"
.venv/bin/xtag warm
