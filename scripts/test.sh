#!/usr/bin/env bash
# Install everything the tests need (Debian packages, npm and PyPI packages), then run them all.
source "$(dirname "$0")/setup.sh"
ensure_base
ensure_apt nginx          # tests/build serve the built site with it, as a real static host
ensure_venv test
cd "$ROOT"
"$VENV/bin/python" -m pytest "$@"
