#!/usr/bin/env bash
# Create (or reuse) a side virtualenv holding an older ONNX Runtime training release, for the
# tests that prove ortckpt against it (tests/ort/test_ort_releases.py).
#
#   scripts/setup_ort_release_env.sh RELEASE [DIR]
#
# RELEASE   1.17.3: onnxruntime-training-cpu==1.17.3 (writes and reads only format version 1),
#           with numpy<2 and onnx==1.15.0, on Python 3.10 (its wheels stop at 3.11; 3.10 is the
#           interpreter it was tested with here).
# DIR       default $ORTCKPT_ORT117_VENV, else <repo>/.ort-venv-1.17.
#
# ORT 1.15 (the checkpoint folder format) is not installed here: its wheel is 224 MB and needs
# its own venv, so its output is committed instead (tests/data/ort115, scripts/make_ort115_fixtures.py).
#
# Idempotent like scripts/setup_ort_env.sh: a venv whose marker and imports match is reused. The
# last line on stdout is the venv's python.
# Environment: ORTCKPT_ORT117_PYTHON  the interpreter to create the venv with (default: python3.10,
#              else the newest ~/.pyenv/versions/3.10.*/bin/python).
# Exit status: 0 ready; 1 no suitable interpreter or unknown RELEASE; 2 installation failed.
set -euo pipefail

release="${1:-}"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { echo "setup_ort_release_env: $*" >&2; }

case "$release" in
1.17.3)
    REQS=("onnxruntime-training-cpu==1.17.3" "numpy<2" "onnx==1.15.0")
    default_dir="${ORTCKPT_ORT117_VENV:-$repo_root/.ort-venv-1.17}"
    py_env="${ORTCKPT_ORT117_PYTHON:-}"
    ;;
*)
    log "unknown release '$release' (supported: 1.17.3)"
    exit 1
    ;;
esac
MARKER_TEXT="ortckpt-ort-release-env v1: ${REQS[*]}"

venv="${2:-$default_dir}"
mkdir -p "$(dirname "$venv")"
venv="$(cd "$(dirname "$venv")" && pwd)/$(basename "$venv")"
marker="$venv/.ortckpt-ort-env"
py="$venv/bin/python"

check_env() {
    [ -x "$py" ] || return 1
    "$py" - "$release" <<'PYEOF' >/dev/null 2>&1
import sys
import numpy, onnx, onnxruntime
from onnxruntime.capi import _pybind_state as C
assert onnxruntime.__version__ == sys.argv[1], onnxruntime.__version__
assert numpy.__version__.split(".")[0] == "1"
assert hasattr(C, "load_checkpoint") and hasattr(C, "save_checkpoint")
PYEOF
}

if [ -f "$marker" ] && [ "$(cat "$marker")" = "$MARKER_TEXT" ] && check_env; then
    log "ORT $release environment already set up in $venv"
    echo "$py"
    exit 0
fi

lock="${TMPDIR:-/tmp}/ortckpt-ort-env-$(printf %s "$venv" | cksum | cut -d' ' -f1).lock"
if command -v flock >/dev/null 2>&1; then
    exec 9>"$lock"
    flock 9
    if [ -f "$marker" ] && [ "$(cat "$marker")" = "$MARKER_TEXT" ] && check_env; then
        echo "$py"
        exit 0
    fi
fi

pick_python() {
    local c
    for c in $py_env python3.10 $(ls -d "$HOME"/.pyenv/versions/3.10.*/bin/python 2>/dev/null | sort -V -r); do
        command -v "$c" >/dev/null 2>&1 || continue
        if "$c" -c 'import sys, venv; sys.exit(0 if sys.version_info[:2] == (3, 10) else 1)' >/dev/null 2>&1; then
            command -v "$c"
            return 0
        fi
    done
    return 1
}

if [ ! -x "$py" ] || ! "$py" -c 'import sys; assert sys.version_info[:2] == (3, 10)' >/dev/null 2>&1; then
    base_py="$(pick_python)" || {
        log "no Python 3.10 found (set ORTCKPT_ORT117_PYTHON)"
        exit 1
    }
    log "creating venv $venv with $base_py"
    rm -f "$marker"
    "$base_py" -m venv --clear "$venv"
fi

rm -f "$marker"
log "installing ${REQS[*]} into $venv"
export PIP_DISABLE_PIP_VERSION_CHECK=1
if ! "$py" -m pip install --quiet --no-input "${REQS[@]}" >&2; then
    log "pip install failed (is the package index reachable?)"
    exit 2
fi
if ! check_env; then
    log "installed packages do not import as expected in $venv"
    exit 2
fi
echo "$MARKER_TEXT" >"$marker"
log "ORT $release environment ready in $venv"
echo "$py"
