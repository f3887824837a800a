#!/usr/bin/env bash
# Create .venv with xtag and its training/test extras. Torch is pinned to the CPU wheel first:
# a bare "torch" requirement would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip "setuptools>=70" wheel
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[train,dev]"
# The dashboard test drives headless Chromium (Debian package); install it when we can.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "warning: could not install chromium; the dashboard browser test will be skipped" >&2
fi
.venv/bin/python -c "import torch, numpy, sklearn; print('xtag env ready: torch', torch.__version__, 'numpy', numpy.__version__, 'sklearn', sklearn.__version__)"
