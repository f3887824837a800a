#!/usr/bin/env bash
# The dashboard browser test (tests/service/test_svc_dashboard.py) drives headless Chromium. Install the
# Debian package when it is missing and we can (root, apt-get: CI), saying so; otherwise the test is skipped.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing the Debian package chromium (apt-get update, apt-get install chromium) for the browser test"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "warning: could not install chromium; the dashboard browser test will be skipped" >&2
else
  echo "note: chromium is not installed (needs root and apt-get); the dashboard browser test will be skipped"
fi
