#!/usr/bin/env bash
# The wheel matrix: installs each wheel of DIST (default dist/, from scripts/build_wheels.sh) into
# a fresh virtualenv of every CPython found under ~/.pyenv/versions (3.10 and newer; PYENV_ROOT
# moves it) that the wheel supports, once with the lowest NumPy/ml_dtypes the wheel allows on that
# Python and once with the newest, and runs there: the README's quick start (on the checkpoint ORT
# wrote that it names), `ortckpt inspect` and `ortckpt inspect --json`. Prints a matrix (wheel x Python x
# NumPy: pass/fail) and exits 1 if any cell failed. A Python that is not installed is skipped
# with a message. Installs come from uv's cache after the first run (seconds per cell).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dist=$(cd "${1:-$repo/dist}" && pwd)
uv="$repo/.venv/bin/uv"
pyenv_root=${PYENV_ROOT:-$HOME/.pyenv}
fixture="$repo/tests/data/artifacts/trained.ckpt"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The README's quick start (its first python block under ## Quick start), run as written beside a
# copy of the ORT-written checkpoint it names (tests/data/artifacts/trained.ckpt).
awk '/^## Quick start/{u=1} u&&/^```python/{p=1;next} p&&/^```/{exit} p' "$repo/README.md" >"$work/readme_example.py"
if [ ! -s "$work/readme_example.py" ]; then
  echo "error: no python block under '## Quick start' in README.md" >&2
  exit 1
fi
# the file the example saves, inspected after it runs (read from the example, so they never drift)
saved=$(sed -n 's/.*ortckpt\.save([^,]*, *"\([^"]*\)".*/\1/p' "$work/readme_example.py" | tail -1)
if [ -z "$saved" ]; then
  echo "error: the quick start's python block saves no file (ortckpt.save(state, \"NAME\"))" >&2
  exit 1
fi

pythons=()
for minor in 10 11 12 13 14; do
  py=$(ls -d "$pyenv_root"/versions/3.$minor.*/bin/python3.$minor 2>/dev/null | sort -V | tail -1 || true)
  if [ -n "$py" ] && [ -x "$py" ]; then
    pythons+=("$py")
  else
    echo "skip: CPython 3.$minor is not installed under $pyenv_root/versions"
  fi
done
if [ ${#pythons[@]} -eq 0 ]; then
  echo "skip: no CPython found under $pyenv_root/versions: wheel matrix not run"
  exit 0
fi

# Does wheel tag (e.g. cp311-abi3, cp310-cp310) install on CPython 3.<minor>?
supports() {
  local tag=$1 minor=$2 wheel_minor
  wheel_minor=${tag#cp3}
  wheel_minor=${wheel_minor%%-*}
  case $tag in
    *-abi3) [ "$minor" -ge "$wheel_minor" ] ;;
    *) [ "$minor" -eq "$wheel_minor" ] ;;
  esac
}

run_cell() {  # wheel python resolution -> prints numpy version; exit status = pass/fail
  local wheel=$1 py=$2 resolution=$3 venv
  venv=$(mktemp -d "$work/venv.XXXX")
  "$uv" venv -q -p "$py" "$venv" &&
    "$uv" pip install -q -p "$venv/bin/python" --no-build --resolution "$resolution" "$wheel" &&
    mkdir -p "$venv/run/tests/data/artifacts" && cp "$fixture" "$venv/run/tests/data/artifacts/" &&
    (cd "$venv/run" && "$venv/bin/python" "$work/readme_example.py") >"$venv/log" 2>&1 &&
    "$venv/bin/ortckpt" inspect "$fixture" >>"$venv/log" 2>&1 &&
    "$venv/bin/ortckpt" inspect --json "$venv/run/$saved" >>"$venv/log" 2>&1 &&
    "$venv/bin/python" -c 'import numpy, ml_dtypes; print(f"numpy {numpy.__version__} ml_dtypes {ml_dtypes.__version__}")' \
      >"$venv/versions" 2>>"$venv/log"
  local rc=$?
  cat "$venv/versions" 2>/dev/null || echo "numpy ?"
  if [ $rc -ne 0 ]; then
    sed 's/^/    | /' "$venv/log" >&2 || true
  fi
  rm -rf "$venv"
  return $rc
}

rows=()
failed=0
for wheel in "$dist"/*.whl; do
  name=$(basename "$wheel")
  tag=$(cut -d- -f3,4 <<<"$name")
  for py in "${pythons[@]}"; do
    minor=$("$py" -c 'import sys; print(sys.version_info[1])')
    supports "$tag" "$minor" || continue
    pyver=$("$py" -c 'import platform; print(platform.python_version())')
    for resolution in lowest highest; do
      label=$([ "$resolution" = lowest ] && echo "lowest" || echo "newest")
      if versions=$(run_cell "$wheel" "$py" "$resolution"); then
        result=pass
      else
        result=FAIL
        failed=1
      fi
      rows+=("$(printf '%-16s %-8s %-7s %-34s %s' "$tag" "$pyver" "$label" "$versions" "$result")")
    done
  done
done

echo
echo "wheel matrix ($(ls "$dist"/*.whl | xargs -n1 basename | tr '\n' ' '))"
printf '%-16s %-8s %-7s %-34s %s\n' "wheel tag" python numpy "installed" result
printf '%s\n' "${rows[@]}"
exit $failed
