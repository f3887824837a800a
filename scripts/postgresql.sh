#!/usr/bin/env bash
# The PostgreSQL feedback-store test (tests/service/test_svc_feedback.py) starts a throwaway server with initdb and
# pg_ctl. Install Debian's postgresql package when they are missing and we can (root, apt-get: CI), saying so;
# otherwise that test is skipped. No server is started here: the test starts and stops its own.
set -euo pipefail
if command -v initdb >/dev/null 2>&1 || compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing the Debian package postgresql (apt-get update, apt-get install postgresql) for the feedback-store test"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null) \
    || echo "warning: could not install postgresql; the PostgreSQL feedback test will be skipped" >&2
else
  echo "note: postgresql is not installed (needs root and apt-get); the PostgreSQL feedback test will be skipped"
fi
