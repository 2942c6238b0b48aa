#!/usr/bin/env bash
# The "lowest direct dependencies" run: installs the CPython 3.10 wheel (the oldest Python
# supported) from DIST (default dist/, made by scripts/build_wheels.sh) into a fresh virtualenv with
# uv's --resolution lowest-direct, so NumPy, ml_dtypes and onnx are the lowest versions that
# pyproject.toml allows; checks that those are exactly the declared floors (so the floors are what
# this run tests); then runs the pytest suite against that install, except tests/ort (which runs
# in ORT's own side virtualenv), the benchmark smoke test and the slow tier: the everyday command
# read-only (which runs .venv's install, not this one: 8 minutes of the run for nothing it could
# find here) and the multi-GiB memory and lazy-loading bounds of ortckpt's own code, which the
# full pytest run checks. Arguments go to pytest.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dist=$(cd "${DIST:-$repo/dist}" && pwd)
uv="$repo/.venv/bin/uv"
pyenv_root=${PYENV_ROOT:-$HOME/.pyenv}
py=${ORTCKPT_PY310:-$(ls -d "$pyenv_root"/versions/3.10.*/bin/python3.10 2>/dev/null | sort -V | tail -1 || true)}
if [ -z "$py" ] || [ ! -x "$py" ]; then
  echo "skip: no CPython 3.10 under $pyenv_root/versions (set ORTCKPT_PY310): lowest-direct run not done"
  exit 0
fi
wheel=$(ls "$dist"/ortckpt-*-cp310-cp310-*.whl | head -1)
venv=$(mktemp -d)
trap 'rm -rf "$venv"' EXIT

"$uv" venv -q -p "$py" "$venv"
# The package's own requirements are the direct ones: each at the lowest version allowed.
"$uv" pip install -q -p "$venv/bin/python" --no-build --resolution lowest-direct \
  "$wheel[onnx]" numpy ml_dtypes onnx
# The test tools at their newest (they are not what this run checks).
"$uv" pip install -q -p "$venv/bin/python" --no-build pytest hypothesis psutil

# Installed == declared floor, for every runtime requirement and the onnx extra.
"$venv/bin/python" - <<'PY'
import re
import sys
from importlib.metadata import requires, version

def release(text: str) -> tuple[int, ...]:
    """The release numbers without trailing zeros: "0.5" and "0.5.0" are the same version."""
    parts = [int(x) for x in re.findall(r"\d+", text.split("+")[0])]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


failed = False
for req in requires("ortckpt") or []:
    m = re.match(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9][^,;\s]*)", req)
    if not m or ("extra ==" in req and "'onnx'" not in req and '"onnx"' not in req):
        continue
    name, floor = m.groups()
    got = version(name)
    same = release(got) == release(floor)
    mark = "ok" if same else "MISMATCH"
    failed |= not same
    print(f"{name}: declared >= {floor}, installed {got}: {mark}")
sys.exit(1 if failed else 0)
PY

cd "$repo"
# ortckpt must come from the venv (the wheel), not the source tree: python/ is not on sys.path
# (pytest adds the repository and scripts/ only: pyproject.toml's pythonpath), and this checks it.
"$venv/bin/python" -c 'import ortckpt, sys; f = ortckpt.__file__; print("ortckpt from", f); sys.exit("/site-packages/" not in f)'
"$venv/bin/python" -m pytest -q -p no:cacheprovider -m "not slow" tests --ignore tests/ort \
  --ignore tests/test_bench_smoke.py "$@"
