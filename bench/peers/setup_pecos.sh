#!/usr/bin/env bash
# Build the PECOS (libpecos) peer venv used by bench/peers/pecos_xlinear.py.
#
#   bash bench/peers/setup_pecos.sh            # creates <repo>/bench/.venv-pecos
#   PECOS_VENV=/some/dir bash bench/peers/setup_pecos.sh
#
# Benchmark-only: PECOS is never a dependency of xtag itself.
# Idempotent: if the venv already imports pecos, nothing is installed.
#
# Order matters: libpecos depends on torch (for its X-Transformer part). A plain
# "pip install libpecos" would pull the multi-GB CUDA torch, so the CPU torch
# wheel is installed first and pip then sees the torch requirement satisfied.
# libpecos 1.2.x is built against the numpy 1.x ABI, hence "numpy<2".
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${PECOS_VENV:-$REPO_ROOT/bench/.venv-pecos}"
PY_BIN="${PECOS_PYTHON:-}"
TORCH_VERSION="2.13.0"
# CPU wheel on disk (pip's find-links dir on this machine); override with TORCH_WHEEL=...
TORCH_WHEEL="${TORCH_WHEEL:-}"
if [[ -z "$TORCH_WHEEL" ]]; then
    for w in /opt/wheels/torch-${TORCH_VERSION}+cpu-*.whl; do
        [[ -f "$w" ]] && TORCH_WHEEL="$w" && break
    done
fi

print_versions() {
    "$VENV/bin/python" - <<'EOF'
import sys
import numpy, scipy, torch, pecos
from importlib.metadata import version
print(f"python   {sys.version.split()[0]}  ({sys.executable})")
print(f"libpecos {version('libpecos')} (pecos.__version__={pecos.__version__})")
print(f"torch    {torch.__version__}")
print(f"numpy    {numpy.__version__}")
print(f"scipy    {scipy.__version__}")
EOF
}

OMIKUJI="omikuji==0.5.2"  # the other peer of bench/peers_exclude_self.py (bench/peers/omikuji_bonsai.py)
if [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" -c "import pecos.xmc.xlinear" >/dev/null 2>&1; then
    "$VENV/bin/python" -c "import omikuji" >/dev/null 2>&1 || "$VENV/bin/python" -m pip install -q "$OMIKUJI"
    echo "[setup_pecos] $VENV already has pecos and omikuji; skipping install"
    print_versions
    exit 0
fi

# Pick an interpreter: the on-disk torch wheel is cp311, so prefer python3.11.
if [[ -z "$PY_BIN" ]]; then
    if [[ -n "$TORCH_WHEEL" ]]; then
        tag="$(basename "$TORCH_WHEEL" | sed -E 's/.*-(cp[0-9]+)-cp[0-9]+-.*/\1/')"
        cand="python${tag:2:1}.${tag:3}"
        if command -v "$cand" >/dev/null 2>&1; then PY_BIN="$cand"; fi
    fi
    PY_BIN="${PY_BIN:-python3}"
fi

echo "[setup_pecos] creating venv $VENV with $PY_BIN ($("$PY_BIN" --version 2>&1))"
"$PY_BIN" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip)
"${PIP[@]}" install -q --upgrade pip setuptools wheel

if [[ -n "$TORCH_WHEEL" ]]; then
    echo "[setup_pecos] installing CPU torch from $TORCH_WHEEL"
    "${PIP[@]}" install -q "$TORCH_WHEEL"
else
    echo "[setup_pecos] WARNING: no local CPU torch wheel found; installing torch==$TORCH_VERSION" \
         "from the configured index (set TORCH_WHEEL or PIP_INDEX_URL to a CPU wheel source to avoid CUDA)"
    "${PIP[@]}" install -q "torch==$TORCH_VERSION"
fi

echo "[setup_pecos] installing libpecos (numpy<2)"
# Re-state the torch pin so the resolver can never swap the CPU build out.
"${PIP[@]}" install -q libpecos "$OMIKUJI" "numpy<2" "torch==$TORCH_VERSION"

"$VENV/bin/python" -c "import pecos.xmc.xlinear" \
    || { echo "[setup_pecos] ERROR: pecos failed to import" >&2; exit 1; }
echo "[setup_pecos] done"
print_versions
