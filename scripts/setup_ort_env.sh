#!/usr/bin/env bash
# Create (or reuse) a side virtualenv holding a real ONNX Runtime training release: 1.19.2 is the
# oracle of the tests in tests/ort/; 1.17.3, the last release that reads and writes format
# version 1, is proven both ways by tests/ort/test_ort_releases.py.
#
#   scripts/setup_ort_env.sh [--release RELEASE] [DIR]
#
# RELEASE   1.19.2 (default): onnxruntime-training-cpu==1.19.2, numpy<2 (ORT 1.19.2 is built
#             against numpy 1.x), onnx==1.16.2 (newer onnx writes IR version 11, which ORT 1.19.2
#             refuses); on Python 3.8-3.12.
#             DIR defaults to $ORTCKPT_ORT_VENV, else <repo>/.ort-venv; the interpreter to create it
#             with to $ORTCKPT_ORT_PYTHON, else the first python3.11/3.12/3.10/3.9/python3 found.
#           1.17.3: onnxruntime-training-cpu==1.17.3, numpy<2, onnx==1.15.0, on Python 3.10 (its
#             wheels stop at 3.11; 3.10 is the interpreter it was tested with here).
#             DIR defaults to $ORTCKPT_ORT117_VENV, else <repo>/.ort-venv-1.17; the interpreter to
#             $ORTCKPT_ORT117_PYTHON, else python3.10, else the newest ~/.pyenv/versions/3.10.*.
#           current: the newest onnxruntime (inference only, >= 1.20: ORT adapters), numpy and onnx
#             from PyPI, for tests/ort/test_ort_adapters.py. DIR defaults to
#             $ORTCKPT_ORT_CURRENT_VENV, else <repo>/.ort-venv-current; the interpreter to
#             $ORTCKPT_ORT_CURRENT_PYTHON, else the first python3.12/3.11/3.13/3.10/python3 found.
#             Not pinned, by design: it proves ortckpt against what users install today.
# The venvs are kept apart from the development environment because of numpy<2. ORT 1.15 (the
# checkpoint folder format) is not installed here: its wheel is 224 MB and needs its own venv, so
# its output is committed instead (tests/data/ort115, scripts/make_ort115_fixtures.py).
#
# Idempotent: when DIR already holds a venv whose marker matches the pinned requirements and whose
# packages import at the right versions, nothing is installed. The last line printed on stdout is
# the venv's python path (so callers can do PY=$(scripts/setup_ort_env.sh | tail -n1)).
# Exit status: 0 ready; 1 no suitable interpreter, unknown RELEASE or bad arguments; 2 package
# installation failed (no network?).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { echo "setup_ort_env: $*" >&2; }

release=1.19.2
dir_arg=""
while [ $# -gt 0 ]; do
    case "$1" in
    --release) [ $# -ge 2 ] || { log "--release needs a value"; exit 1; }; release="$2"; shift 2 ;;
    --release=*) release="${1#--release=}"; shift ;;
    -*) log "unknown option '$1' (usage: setup_ort_env.sh [--release RELEASE] [DIR])"; exit 1 ;;
    *) [ -z "$dir_arg" ] || { log "more than one DIR given"; exit 1; }; dir_arg="$1"; shift ;;
    esac
done

# Per release: the pins, the default DIR, the interpreters to try and the Python versions allowed.
# The marker texts are those of the venvs made before the two setup scripts became one, so those
# venvs are reused as they are.
case "$release" in
1.19.2)
    REQS=("onnxruntime-training-cpu==1.19.2" "numpy<2" "onnx==1.16.2")
    MARKER_TEXT="ortckpt-ort-env v1: ${REQS[*]}"
    default_dir="${ORTCKPT_ORT_VENV:-$repo_root/.ort-venv}"
    py_override="${ORTCKPT_ORT_PYTHON:-}"
    py_candidates=(python3.11 python3.12 python3.10 python3.9 python3)
    py_min="(3, 8)" py_max="(3, 12)" py_env_name=ORTCKPT_ORT_PYTHON
    ;;
1.17.3)
    REQS=("onnxruntime-training-cpu==1.17.3" "numpy<2" "onnx==1.15.0")
    MARKER_TEXT="ortckpt-ort-release-env v1: ${REQS[*]}"
    default_dir="${ORTCKPT_ORT117_VENV:-$repo_root/.ort-venv-1.17}"
    py_override="${ORTCKPT_ORT117_PYTHON:-}"
    mapfile -t pyenv_310 < <(ls -d "$HOME"/.pyenv/versions/3.10.*/bin/python 2>/dev/null | sort -V -r)
    py_candidates=(python3.10 "${pyenv_310[@]}")
    py_min="(3, 10)" py_max="(3, 10)" py_env_name=ORTCKPT_ORT117_PYTHON
    ;;
current)
    REQS=("onnxruntime" "numpy" "onnx")
    MARKER_TEXT="ortckpt-ort-current-env v1: ${REQS[*]}"
    default_dir="${ORTCKPT_ORT_CURRENT_VENV:-$repo_root/.ort-venv-current}"
    py_override="${ORTCKPT_ORT_CURRENT_PYTHON:-}"
    py_candidates=(python3.12 python3.11 python3.13 python3.10 python3)
    py_min="(3, 10)" py_max="(3, 13)" py_env_name=ORTCKPT_ORT_CURRENT_PYTHON
    ;;
*)
    log "unknown release '$release' (supported: 1.19.2, 1.17.3, current)"
    exit 1
    ;;
esac
onnx_pin="${REQS[2]#onnx==}"

venv="${dir_arg:-$default_dir}"
mkdir -p "$(dirname "$venv")"
venv="$(cd "$(dirname "$venv")" && pwd)/$(basename "$venv")"
marker="$venv/.ortckpt-ort-env"
py="$venv/bin/python"

python_fits() {
    # True when interpreter $1 has the venv module and a version this release has wheels for.
    "$1" -c "import sys, venv; sys.exit(0 if $py_min <= sys.version_info[:2] <= $py_max else 1)" \
        >/dev/null 2>&1
}

check_env() {
    # True when the venv's python imports the release's packages at the pinned versions.
    [ -x "$py" ] || return 1
    "$py" - "$release" "$onnx_pin" <<'PYCHECK' >/dev/null 2>&1
import sys
import numpy, onnx
import onnxruntime
if sys.argv[1] == "current":
    # Inference-only onnxruntime: the adapter API arrived in 1.20.
    assert hasattr(onnxruntime, "AdapterFormat"), onnxruntime.__version__
    sys.exit(0)
import flatbuffers
from onnxruntime.capi import _pybind_state as C
assert onnxruntime.__version__ == sys.argv[1], onnxruntime.__version__
assert numpy.__version__.split(".")[0] == "1", numpy.__version__
assert onnx.__version__ == sys.argv[2], onnx.__version__
assert hasattr(C, "load_checkpoint") and hasattr(C, "save_checkpoint")
PYCHECK
}

ready() { [ -f "$marker" ] && [ "$(cat "$marker")" = "$MARKER_TEXT" ] && check_env; }

if ready; then
    log "ORT $release environment already set up in $venv"
    echo "$py"
    exit 0
fi

# Serialize concurrent setups (e.g. several pytest processes) on the same DIR.
lock="${TMPDIR:-/tmp}/ortckpt-ort-env-$(printf %s "$venv" | cksum | cut -d' ' -f1).lock"
if command -v flock >/dev/null 2>&1; then
    exec 9>"$lock"
    flock 9
    # Someone else may have finished while we waited.
    if ready; then
        log "ORT $release environment already set up in $venv"
        echo "$py"
        exit 0
    fi
fi

pick_python() {
    local c
    local cands=("${py_candidates[@]}")
    [ -z "$py_override" ] || cands=("$py_override")
    for c in "${cands[@]}"; do
        command -v "$c" >/dev/null 2>&1 || continue
        if python_fits "$c"; then
            command -v "$c"
            return 0
        fi
    done
    return 1
}

if [ ! -x "$py" ] || ! python_fits "$py"; then
    base_py="$(pick_python)" || {
        log "no Python in $py_min..$py_max with the venv module found (set $py_env_name)"
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
