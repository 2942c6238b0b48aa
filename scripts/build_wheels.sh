#!/usr/bin/env bash
# Builds the wheels a user can install anywhere, and the sdist, into OUT (default dist/):
#   * manylinux2014 (glibc 2.17) wheels, linked with zig (`maturin build --zig`; the `ziglang`
#     package from PyPI provides zig), so they install on any Linux with glibc >= 2.17
#     (RHEL/CentOS 7+, Debian 8+, Ubuntu 14.04+), for x86-64 into OUT and for aarch64 (arm64,
#     cross-compiled by zig from any host) into OUT/aarch64, so that `pip install OUT/*.whl`
#     meets only the x86-64 wheels;
#   * one abi3 wheel (stable ABI, CPython 3.11+: the buffer protocol the native module exports is
#     in the limited API from 3.11 on), plus a version-specific wheel for CPython 3.10;
#   * macOS wheels for x86-64 (macOS >= 10.12) and arm64 (Apple silicon, macOS >= 11.0), the same
#     two kinds, cross-compiled with zig (which brings macOS's system library stubs; no SDK needed)
#     into OUT/macos; tests/test_macos_wheels.py checks their tags, minimum macOS version and that
#     the extension links nothing but the system library (CI also tests them on macOS runners);
#   * the sdist.
# Runs from a git checkout, the sdist or any unpacked source tree.
#   scripts/build_wheels.sh [OUT]              # build (or reuse from the cache) and copy into OUT
#   scripts/build_wheels.sh --list-sources     # print the files the cache key hashes; build nothing
# The glibc floor is then checked with auditwheel (the symbol versions the shared library needs).
# The wheels are cached by the hash of every source file that goes into them
# (ORTCKPT_WHEEL_CACHE, default ~/.cache/ortckpt/wheels): an unchanged tree is not rebuilt.
# Needs the project's .venv (scripts/setup.sh) for maturin, zig and auditwheel, and rustup for the
# aarch64 and macOS targets' standard libraries (added here when missing: `rustup target add`).
# The aarch64 wheels are tested under QEMU by scripts/test_arm64.sh.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
out=${1:-dist}
venv="$repo/.venv/bin"
py310=${ORTCKPT_PY310:-$(ls -d "$HOME"/.pyenv/versions/3.10.*/bin/python3.10 2>/dev/null | tail -1)}
platform=manylinux2014
arches=(x86_64 aarch64)
macos_targets=(x86_64-apple-darwin aarch64-apple-darwin)

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
# The cache key: the hash of every such file, so it changes with the content; one directory per
# architecture (the sdist goes with x86-64).
key=$(source_files | xargs sha256sum | sha256sum | cut -c1-16)
cache_root=${ORTCKPT_WHEEL_CACHE:-$HOME/.cache/ortckpt/wheels}
cache_dir() {  # arch or macOS target -> the cache directory of its wheels
  if [ "$1" = x86_64 ]; then echo "$cache_root/$key"; else echo "$cache_root/$key-$1"; fi
}
add_target() {
  if ! rustup target list --installed | grep -qx "$1"; then
    rustup target add "$1"
  fi
}
export PATH="$venv:$PATH"  # maturin finds zig through python -m ziglang
for arch in "${arches[@]}"; do
  cache=$(cache_dir "$arch")
  [ -f "$cache/.complete" ] && continue
  rm -rf "$cache"
  mkdir -p "$cache"
  # this machine's architecture without --target, so the build reuses target/release (setup.sh's)
  target=()
  if [ "$arch" != "$(uname -m)" ]; then
    target=(--target "$arch-unknown-linux-gnu")
    add_target "$arch-unknown-linux-gnu"
  fi
  echo "building $arch wheels into $cache"
  maturin build --release --zig "${target[@]}" --compatibility "$platform" --features abi3 \
    -o "$cache" -i "$venv/python" -q
  if [ -n "$py310" ] && [ -x "$py310" ]; then
    maturin build --release --zig "${target[@]}" --compatibility "$platform" -o "$cache" -i "$py310" -q
  else
    echo "warning: no CPython 3.10 (set ORTCKPT_PY310): no cp310 $arch wheel" >&2
  fi
  if [ "$arch" = x86_64 ]; then
    maturin sdist -o "$cache"
  fi
  touch "$cache/.complete"
done
for target in "${macos_targets[@]}"; do
  cache=$(cache_dir "$target")
  [ -f "$cache/.complete" ] && continue
  rm -rf "$cache"
  mkdir -p "$cache"
  add_target "$target"
  echo "building $target wheels into $cache"
  maturin build --release --zig --target "$target" --features abi3 -o "$cache" -i "$venv/python" -q
  if [ -n "$py310" ] && [ -x "$py310" ]; then
    maturin build --release --zig --target "$target" -o "$cache" -i "$py310" -q
  else
    echo "warning: no CPython 3.10 (set ORTCKPT_PY310): no cp310 $target wheel" >&2
  fi
  touch "$cache/.complete"
done
mkdir -p "$out"
rm -f "$out"/ortckpt-*.whl "$out"/ortckpt-*.tar.gz  # only this tree's wheels in the matrix
cp "$(cache_dir x86_64)"/*.whl "$(cache_dir x86_64)"/*.tar.gz "$out"/
for arch in "${arches[@]}"; do
  [ "$arch" = x86_64 ] && continue
  mkdir -p "$out/$arch"
  rm -f "$out/$arch"/ortckpt-*.whl
  cp "$(cache_dir "$arch")"/*.whl "$out/$arch"/
done
mkdir -p "$out/macos"
rm -f "$out/macos"/ortckpt-*.whl
for target in "${macos_targets[@]}"; do
  cp "$(cache_dir "$target")"/*.whl "$out/macos"/
done

# The glibc floor: auditwheel reads the symbol versions the extension needs and names the
# most compatible manylinux policy; it must be manylinux_2_17 (= manylinux2014) on each architecture.
for arch in "${arches[@]}"; do
  for whl in "$(cache_dir "$arch")"/*.whl; do
    report=$("$venv/auditwheel" show "$whl")
    if ! grep -q "manylinux_2_17_$arch" <<<"$report"; then
      echo "$report" >&2
      echo "error: $(basename "$whl") needs a newer glibc than 2.17" >&2
      exit 1
    fi
    echo "$(basename "$whl"): glibc 2.17 ok ($(grep -o 'GLIBC_[0-9.]*' <<<"$report" | sort -V | tail -1 || true) max symbol version)"
  done
done
ls "$out" "$out"/aarch64 "$out"/macos
