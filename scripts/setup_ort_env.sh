#!/usr/bin/env bash
# Create (or reuse) the side virtualenv holding the real ONNX Runtime training build that the
# tests in tests/ort/ use as an oracle.
#
#   scripts/setup_ort_env.sh [DIR]
#
# DIR defaults to $ORTCKPT_ORT_VENV, else <repo>/.ort-venv. The venv gets
#   onnxruntime-training-cpu==1.19.2   the oracle
#   numpy<2                            ORT 1.19.2 is built against numpy 1.x
#   onnx==1.16.2                       newer onnx writes IR version 11, which ORT 1.19.2 refuses
# It is kept apart from the development environment because of numpy<2.
#
# Idempotent: when DIR already holds a venv whose marker matches the pinned requirements and whose
# packages import at the right versions, nothing is installed. The last line printed on stdout is
# the venv's python path (so callers can do PY=$(scripts/setup_ort_env.sh | tail -n1)).
#
# Environment:
#   ORTCKPT_ORT_VENV     default DIR
#   ORTCKPT_ORT_PYTHON   interpreter used to create the venv (default: first python3.11/3.12/3.10/
#                        3.9/python3 found whose version ORT 1.19.2 has wheels for, i.e. 3.8-3.12)
# Exit status: 0 ready; 1 no suitable interpreter; 2 package installation failed (no network?).
set -euo pipefail

REQS=("onnxruntime-training-cpu==1.19.2" "numpy<2" "onnx==1.16.2")
MARKER_TEXT="ortckpt-ort-env v1: ${REQS[*]}"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-${ORTCKPT_ORT_VENV:-$repo_root/.ort-venv}}"
mkdir -p "$(dirname "$venv")"
venv="$(cd "$(dirname "$venv")" && pwd)/$(basename "$venv")"
marker="$venv/.ortckpt-ort-env"
py="$venv/bin/python"

log() { echo "setup_ort_env: $*" >&2; }

check_env() {
    # True when the venv's python imports the oracle's packages at the pinned versions.
    [ -x "$py" ] || return 1
    "$py" - <<'EOF' >/dev/null 2>&1
import numpy, onnx, flatbuffers
from onnxruntime.capi import _pybind_state as C
import onnxruntime
assert onnxruntime.__version__ == "1.19.2", onnxruntime.__version__
assert numpy.__version__.split(".")[0] == "1", numpy.__version__
assert onnx.__version__ == "1.16.2", onnx.__version__
assert hasattr(C, "load_checkpoint") and hasattr(C, "save_checkpoint")
EOF
}

if [ -f "$marker" ] && [ "$(cat "$marker")" = "$MARKER_TEXT" ] && check_env; then
    log "ORT environment already set up in $venv"
    echo "$py"
    exit 0
fi

# Serialize concurrent setups (e.g. several pytest processes) on the same DIR.
lock="${TMPDIR:-/tmp}/ortckpt-ort-env-$(printf %s "$venv" | cksum | cut -d' ' -f1).lock"
if command -v flock >/dev/null 2>&1; then
    exec 9>"$lock"
    flock 9
    # Someone else may have finished while we waited.
    if [ -f "$marker" ] && [ "$(cat "$marker")" = "$MARKER_TEXT" ] && check_env; then
        log "ORT environment already set up in $venv"
        echo "$py"
        exit 0
    fi
fi

pick_python() {
    local cands=()
    if [ -n "${ORTCKPT_ORT_PYTHON:-}" ]; then
        cands=("$ORTCKPT_ORT_PYTHON")
    else
        cands=(python3.11 python3.12 python3.10 python3.9 python3)
    fi
    local c
    for c in "${cands[@]}"; do
        command -v "$c" >/dev/null 2>&1 || continue
        if "$c" -c 'import sys, venv; sys.exit(0 if (3, 8) <= sys.version_info[:2] <= (3, 12) else 1)' \
            >/dev/null 2>&1; then
            command -v "$c"
            return 0
        fi
    done
    return 1
}

if [ ! -x "$py" ] || ! "$py" -c 'import sys' >/dev/null 2>&1; then
    base_py="$(pick_python)" || {
        log "no Python 3.8-3.12 with the venv module found (set ORTCKPT_ORT_PYTHON)"
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
log "ORT environment ready in $venv"
echo "$py"
