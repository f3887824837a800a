#!/usr/bin/env bash
# The main job: set up, pick the debtags corpus, train the default XR-Linear model, export a bundle, evaluate
# it, then serve it. Needs neither root nor network once .venv is installed, and installs no system package.
#   The corpus, first found of: $XTAG_DATA; ../shared/data/debtags; data/debtags (built before); else
#   data/debtags built from this Debian machine's apt lists (no apt-get update).
#   XTAG_REFRESH=1: rebuild data/debtags from the apt lists first and train on it (as root: apt-get update too).
# A rerun resumes runs/debtags-xl; when the corpus changed since that run, it is kept as runs/debtags-xl.<time>
# and a new run starts.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --base   # what the main job needs (no torch); scripts/test.sh installs the rest
XTAG=.venv/bin/xtag
RUN=runs/debtags-xl
say() { echo "main.sh: $*" >&2; }
has_corpus() { [ -f "$1/train.jsonl.gz" ] && [ -f "$1/test.jsonl.gz" ]; }
build_from_apt() {
  local update=""
  [ "$(id -u)" = 0 ] && [ "${XTAG_REFRESH:-0}" = 1 ] && update="--update"   # fetch the lists only when asked
  if ! $XTAG data debtags --out data/debtags $update; then
    say "could not build debtags from this machine's apt lists (the error above). Put a debtags corpus"
    say "(train.jsonl.gz, test.jsonl.gz) in data/debtags, or point XTAG_DATA at one, or as root run"
    say "XTAG_REFRESH=1 bash scripts/main.sh (runs apt-get update -o Acquire::Languages=en first)."
    exit 1
  fi
}

if [ "${XTAG_REFRESH:-0}" = 1 ]; then
  say "XTAG_REFRESH=1: rebuilding data/debtags from this machine's apt lists"
  build_from_apt
  DATA=data/debtags
elif [ -n "${XTAG_DATA:-}" ]; then
  has_corpus "$XTAG_DATA" || { say "XTAG_DATA=$XTAG_DATA holds no train.jsonl.gz and test.jsonl.gz"; exit 1; }
  DATA=$XTAG_DATA
elif has_corpus ../shared/data/debtags; then
  DATA=../shared/data/debtags
elif has_corpus data/debtags; then
  DATA=data/debtags
else
  say "no debtags corpus in ../shared/data/debtags or data/debtags: building data/debtags from the apt lists"
  build_from_apt
  DATA=data/debtags
fi
say "corpus: $DATA"

train() { $XTAG train --corpus "$DATA/train.jsonl.gz" --model xlinear --out "$RUN" "$@"; }
# Resume only a run that was started (it has its config.json): a first run must not print an error.
if [ -f "$RUN/config.json" ]; then
  status=0
  train --resume || status=$?
  if [ "$status" = 3 ]; then   # xtag train: --resume onto a run of another corpus
    OLD="$RUN.$(date -u +%Y%m%dT%H%M%SZ)"
    mv "$RUN" "$OLD"
    say "the corpus changed since $RUN was trained (see above): kept that run as $OLD; training a new one in $RUN"
    train
  elif [ "$status" != 0 ]; then
    exit "$status"
  fi
else
  train
fi
$XTAG export "$RUN" --out bundles/debtags-xl --overwrite
$XTAG evaluate bundles/debtags-xl --corpus "$DATA/test.jsonl.gz" --json "$RUN/metrics.json"
$XTAG predict bundles/debtags-xl "An OpenGL first-person shooter game for Linux" --k 5
if $XTAG serve --help >/dev/null 2>&1; then
  exec $XTAG serve bundles/debtags-xl --host "${XTAG_HOST:-127.0.0.1}" --port "${XTAG_PORT:-8000}"
fi
