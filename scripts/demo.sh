#!/usr/bin/env bash
# The main job until the web page exists: install, then recognise the sample digits natively.
source "$(dirname "$0")/setup.sh"
ensure_base
ensure_venv image
cd "$ROOT"
"$VENV/bin/python" -m engine digit samples/digits/*.png "$@"
