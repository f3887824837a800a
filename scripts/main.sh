#!/usr/bin/env bash
# The main job: set up, build the default corpus (debtags from this Debian machine's apt lists),
# train the default XR-Linear model, export a bundle, evaluate it, then serve it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
XTAG=.venv/bin/xtag
UPDATE=""
[ "$(id -u)" = 0 ] && UPDATE="--update"   # refresh apt lists (Translation-en) when we are root
$XTAG data debtags --out data/debtags $UPDATE
RUN=runs/debtags-xl
RESUME=""
# Resume only a run that was started (it has its config.json): a first run must not print an error.
[ -f "$RUN/config.json" ] && RESUME="--resume"
$XTAG train --corpus data/debtags/train.jsonl.gz --model xlinear --out "$RUN" $RESUME
$XTAG export "$RUN" --out bundles/debtags-xl --overwrite
$XTAG evaluate bundles/debtags-xl --corpus data/debtags/test.jsonl.gz --json "$RUN/metrics.json"
$XTAG predict bundles/debtags-xl "An OpenGL first-person shooter game for Linux" --k 5
if $XTAG serve --help >/dev/null 2>&1; then
  exec $XTAG serve bundles/debtags-xl --host "${XTAG_HOST:-127.0.0.1}" --port "${XTAG_PORT:-8000}"
fi
