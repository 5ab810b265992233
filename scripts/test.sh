#!/usr/bin/env bash
# Install everything the tests need (Debian packages, npm and PyPI packages), then run them all.
source "$(dirname "$0")/setup.sh"
ensure_base
# nginx: a real static host for the built site; chromium: the browser Playwright drives
# (Playwright's own browser download is never used); clang-19 + lld-19: the WebAssembly
# kernels (Debian's default clang 14 emits an outdated relaxed-SIMD opcode); gcc: native kernels;
# mesa-vulkan-drivers: lavapipe, a Vulkan device on the CPU for the WebGPU shaders natively;
# brotli + libnginx-mod-http-brotli-static: the build's .br copies and nginx serving them
ensure_apt nginx chromium clang-19 lld-19 gcc mesa-vulkan-drivers brotli libnginx-mod-http-brotli-static
ensure_venv test
cd "$ROOT"
"$VENV/bin/python" -m pytest "$@"
