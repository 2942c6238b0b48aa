#!/usr/bin/env bash
# Builds the wheels a user can install anywhere, and the sdist, into OUT (default dist/):
#   * manylinux2014 (glibc 2.17) wheels, linked with zig (`maturin build --zig`; the `ziglang`
#     package from PyPI provides zig), so they install on any Linux with glibc >= 2.17
#     (RHEL/CentOS 7+, Debian 8+, Ubuntu 14.04+);
#   * one abi3 wheel (stable ABI, CPython 3.11+: the buffer protocol the native module exports is
#     in the limited API from 3.11 on), plus a version-specific wheel for CPython 3.10;
#   * the sdist.
# Runs from a git checkout, the sdist or any unpacked source tree.
#   scripts/build_wheels.sh [OUT]              # build (or reuse from the cache) and copy into OUT
#   scripts/build_wheels.sh --list-sources     # print the files the cache key hashes; build nothing
# The glibc floor is then checked with auditwheel (the symbol versions the shared library needs).
# The wheels are cached by the hash of every source file that goes into them
# (ORTCKPT_WHEEL_CACHE, default ~/.cache/ortckpt/wheels): an unchanged tree is not rebuilt.
# Needs the project's .venv (scripts/setup.sh) for maturin, zig and auditwheel.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
out=${1:-dist}
venv="$repo/.venv/bin"
py310=${ORTCKPT_PY310:-$(ls -d "$HOME"/.pyenv/versions/3.10.*/bin/python3.10 2>/dev/null | tail -1)}
platform=manylinux2014

# Everything that goes into a wheel or the sdist: found with `find`, not git, so that the script runs
# from the sdist or any unpacked tree as well as from a checkout; what .gitignore keeps out of git
# (build outputs, caches) is left out here too.
source_files() {
  { ls -d Cargo.toml Cargo.lock pyproject.toml README.md LICENSE CHANGELOG.md 2>/dev/null || true
    find rust/core rust/python python -type f \
      -not -path '*/__pycache__/*' -not -path '*/target/*' -not -path '*.egg-info/*' \
      -not -path '*/.*_cache/*' -not -name '*.so' -not -name '*.pyd' -not -name '*.pyc'
  } | LC_ALL=C sort
}
if [ "$out" = --list-sources ]; then  # what the cache key hashes, and nothing else
  source_files
  exit 0
fi
# The cache key: the hash of every such file, so it changes with the content.
key=$(source_files | xargs sha256sum | sha256sum | cut -c1-16)
cache=${ORTCKPT_WHEEL_CACHE:-$HOME/.cache/ortckpt/wheels}/$key
if [ ! -f "$cache/.complete" ]; then
  rm -rf "$cache"
  mkdir -p "$cache"
  export PATH="$venv:$PATH"  # maturin finds zig through python -m ziglang
  echo "building wheels into $cache"
  maturin build --release --zig --compatibility "$platform" --features abi3 -o "$cache" \
    -i "$venv/python" -q
  if [ -n "$py310" ] && [ -x "$py310" ]; then
    maturin build --release --zig --compatibility "$platform" -o "$cache" -i "$py310" -q
  else
    echo "warning: no CPython 3.10 (set ORTCKPT_PY310): no cp310 wheel" >&2
  fi
  maturin sdist -o "$cache"
  touch "$cache/.complete"
fi
mkdir -p "$out"
rm -f "$out"/ortckpt-*.whl "$out"/ortckpt-*.tar.gz  # only this tree's wheels in the matrix
cp "$cache"/*.whl "$cache"/*.tar.gz "$out"/

# The glibc floor: auditwheel reads the symbol versions the extension needs and names the
# most compatible manylinux policy; it must be manylinux_2_17 (= manylinux2014).
for whl in "$cache"/*.whl; do
  report=$("$venv/auditwheel" show "$whl")
  if ! grep -q 'manylinux_2_17_x86_64' <<<"$report"; then
    echo "$report" >&2
    echo "error: $(basename "$whl") needs a newer glibc than 2.17" >&2
    exit 1
  fi
  echo "$(basename "$whl"): glibc 2.17 ok ($(grep -o 'GLIBC_[0-9.]*' <<<"$report" | sort -V | tail -1 || true) max symbol version)"
done
ls "$out"
