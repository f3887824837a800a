#!/usr/bin/env bash
# The test command (README; CI runs exactly this): install everything (Chromium for the browser test and PostgreSQL
# for the feedback-store test, the system packages), lint and format checks, bench/RESULTS.md agrees with bench/results/*.json, then the
# test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/chromium.sh
bash scripts/postgresql.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python -m bench.render_results --check
.venv/bin/python -m pytest -q
