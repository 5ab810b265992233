# Sourced by the other scripts: install what the project needs on a fresh Debian machine.
# Only missing pieces are installed, so a second run is fast and needs no network.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${ENGINE_VENV:-$ROOT/.venv}"
# the reference for Whisper (tests/models/test_whisper.py, tests/speech, tests/audio), installed without
# its declared requirements (triton and a CUDA torch): the test extra lists the ones it needs
OPENAI_WHISPER=20250625
RAPIDOCR=1.4.4          # the OCR reference (tests/ocr), with --no-deps: see pyproject.toml

_sudo() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# ensure_apt PACKAGE...: apt-get install the Debian packages that are not installed yet.
ensure_apt() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "setup: installing Debian packages: ${missing[*]}" >&2
  _sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive _sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The tools: Python 3.11+ with venv, and npm (registry packages are fetched with `npm pack`).
ensure_base() {
  command -v python3 >/dev/null 2>&1 || ensure_apt python3
  python3 -c 'import venv, ensurepip' 2>/dev/null || ensure_apt python3-venv
  command -v npm >/dev/null 2>&1 || ensure_apt npm
  python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    echo "setup: Python 3.11 or newer is needed (found $(python3 --version))" >&2; exit 1; }
}

# ensure_venv EXTRAS: a virtual environment with the project installed (editable) and its extras.
ensure_venv() {
  local extras="$1" stamp
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  stamp="$VENV/.installed-$(cat "$ROOT/pyproject.toml" | sha256sum | cut -c1-16)-$extras"
  if [ ! -e "$stamp" ]; then
    echo "setup: installing Python packages into $VENV ($extras)" >&2
    local log="$VENV/pip-install.log"
    if ! { "$VENV/bin/python" -m pip install -q --upgrade pip &&
           "$VENV/bin/python" -m pip install -q -e "$ROOT[$extras]"; } >"$log" 2>&1; then
      tail -n 30 "$log" >&2; echo "setup: pip install failed (full log: $log)" >&2; exit 1
    fi
    if [ "$extras" = test ] && ! "$VENV/bin/python" -m pip install -q --no-deps "openai-whisper==$OPENAI_WHISPER" >>"$log" 2>&1; then
      tail -n 30 "$log" >&2; echo "setup: pip install openai-whisper failed (full log: $log)" >&2; exit 1
    fi
    if [ "$extras" = test ] && ! "$VENV/bin/python" -m pip install -q --no-deps "rapidocr-onnxruntime==$RAPIDOCR" >>"$log" 2>&1; then
      tail -n 30 "$log" >&2; echo "setup: pip install rapidocr-onnxruntime failed (full log: $log)" >&2; exit 1
    fi
    touch "$stamp"
  fi
}
