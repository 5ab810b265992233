#!/usr/bin/env bash
# The main job: install what is missing, build the static site into dist/ and serve it
# on http://127.0.0.1:8000 (arguments go to `build.py serve`, e.g. --port 8080).
source "$(dirname "$0")/setup.sh"
ensure_base
ensure_apt clang-19 lld-19          # the WebAssembly SIMD kernels the site ships
ensure_apt brotli                   # the .br copies of the runtime (without it: .gz only)
ensure_venv image,site
cd "$ROOT"
exec "$VENV/bin/python" build.py serve "$@"
