#!/usr/bin/env bash
# Install everything the tests need (Debian packages, npm and PyPI packages), then run pytest with
# the arguments given. None runs the whole suite (what .ci/run does); the fast tier is
#   ./scripts/test.sh -m "not slow and not browser"
# Markers (pyproject.toml): browser, build, slow, fuzz, reference. Under CI (CI=true) a missing
# dependency fails its test instead of skipping (tests/helpers.py).
source "$(dirname "$0")/setup.sh"
ensure_base
# nginx: a real static host for the built site; chromium: the browser Playwright drives
# (Playwright's own browser download is never used); clang-19 + lld-19: the WebAssembly
# kernels (Debian's default clang 14 emits an outdated relaxed-SIMD opcode); gcc: native kernels;
# mesa-vulkan-drivers: lavapipe, a Vulkan device on the CPU for the WebGPU shaders natively;
# brotli + libnginx-mod-http-brotli-static: the build's .br copies and nginx serving them;
# espeak-ng + sox: test speech and the WAV/resampler references (tests/audio/clips.py); fonts-dejavu-core:
# the text the OCR tests render (tests/ocr)
ensure_apt nginx chromium clang-19 lld-19 gcc mesa-vulkan-drivers brotli libnginx-mod-http-brotli-static espeak-ng sox fonts-dejavu-core
ensure_venv test
cd "$ROOT"
# pytest-xdist, one worker per core; tests/conftest.py keeps each module's tests on one worker and
# the browser and build tests together on one. TEST_WORKERS=0 runs everything in this process
# (for -s, --pdb); later arguments win, so `-n 0` works too.
"$VENV/bin/python" -m pytest -n "${TEST_WORKERS:-auto}" --dist loadfile "$@"
