#!/usr/bin/env bash
# The test command (README; CI runs exactly this): install everything (and Chromium, the one system package,
# for the browser test), lint and format checks, bench/RESULTS.md agrees with bench/results/*.json, then the
# test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/chromium.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python bench/render_results.py --check
.venv/bin/python -m pytest -q
