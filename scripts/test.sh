#!/usr/bin/env bash
# Install everything the tests need (Debian packages, npm and PyPI packages), then run them all.
source "$(dirname "$0")/setup.sh"
ensure_base
# nginx: a real static host for the built site; chromium: the browser Playwright drives
# (Playwright's own browser download is never used)
ensure_apt nginx chromium
ensure_venv test
cd "$ROOT"
"$VENV/bin/python" -m pytest "$@"
