#!/usr/bin/env bash
# The main job: set up, pick the debtags corpus, train the default XR-Linear model, export a bundle, evaluate
# it, then serve it. Needs neither root nor network once .venv is installed, and installs no system package.
#   The corpus: $XTAG_DATA when set, else data/debtags, which ships with the project (data/debtags/README.md).
#   XTAG_REFRESH=1: build data/debtags-apt from this Debian machine's apt lists instead and train on it (as root:
#   apt-get update first; otherwise the lists must already hold Packages and Translation-en).
# The corpus is checked before anything is installed, so a wrong path fails in a second, not after the setup.
# A rerun resumes runs/debtags-xl; when the corpus changed since that run, it is kept as runs/debtags-xl.<time>
# and a new run starts.
set -euo pipefail
cd "$(dirname "$0")/.."
XTAG=.venv/bin/xtag
RUN=runs/debtags-xl
APT_LISTS=${XTAG_APT_LISTS:-/var/lib/apt/lists}
say() { echo "main.sh: $*" >&2; }
has_corpus() { [ -f "$1/train.jsonl.gz" ] && [ -f "$1/test.jsonl.gz" ]; }
has_apt_lists() { compgen -G "$APT_LISTS/*_Packages*" >/dev/null && compgen -G "$APT_LISTS/*_Translation-en*" >/dev/null; }

# 1. The corpus, before the install: every way it can be missing is said here, with what to do.
if [ "${XTAG_REFRESH:-0}" = 1 ]; then
  DATA=data/debtags-apt
  update=""
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    update="--update"   # root: fetch the lists (with the English translations) first
  elif ! has_apt_lists; then
    say "XTAG_REFRESH=1 needs apt lists holding Packages and Translation-en in $APT_LISTS, and they are not there"
    say "(a fresh container's lists are empty). As root this script runs apt-get update itself; or train on the"
    say "shipped corpus: bash scripts/main.sh without XTAG_REFRESH."
    exit 1
  fi
elif [ -n "${XTAG_DATA:-}" ]; then
  has_corpus "$XTAG_DATA" || { say "XTAG_DATA=$XTAG_DATA holds no train.jsonl.gz and test.jsonl.gz"; exit 1; }
  DATA=$XTAG_DATA
elif has_corpus data/debtags; then
  DATA=data/debtags
else
  say "data/debtags/{train,test}.jsonl.gz are missing from this checkout (they ship with the project: git checkout"
  say "-- data/debtags), or set XTAG_DATA to a folder holding them, or XTAG_REFRESH=1 to build one from apt lists."
  exit 1
fi

# 2. The install (what the main job needs: no torch), then the corpus built from the apt lists if asked.
bash scripts/setup.sh --base
if [ "${XTAG_REFRESH:-0}" = 1 ]; then
  say "XTAG_REFRESH=1: building $DATA from the apt lists in $APT_LISTS"
  if ! $XTAG data debtags --out "$DATA" --lists "$APT_LISTS" $update; then
    say "could not build $DATA from the apt lists (the error above); bash scripts/main.sh without XTAG_REFRESH"
    say "trains on the corpus that ships in data/debtags."
    exit 1
  fi
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
