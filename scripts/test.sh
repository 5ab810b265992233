#!/usr/bin/env bash
# Install everything the tests need (Debian packages, npm and PyPI packages), then run them all.
source "$(dirname "$0")/setup.sh"
ensure_base
ensure_venv test
cd "$ROOT"
"$VENV/bin/python" -m pytest "$@"
