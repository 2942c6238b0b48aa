#!/usr/bin/env bash
# Runs the Python tests against the aarch64 wheel on an aarch64 CPython, under QEMU user-mode
# emulation (no binfmt handler is registered: qemu-aarch64-static runs the interpreter directly):
#   scripts/test_arm64.sh [DIST] [pytest args...]     # DIST default dist/aarch64 (scripts/build_wheels.sh)
# What it sets up (cached under .arm64/, ignored by git; ORTCKPT_ARM64_DIR moves it; delete it to
# start over with the newest packages):
#   * qemu-user-static (apt-get) when qemu-aarch64-static is missing;
#   * a sysroot of Debian 12's own arm64 packages of CPython 3.11 and the libraries it and the
#     wheels load (dpkg --add-architecture arm64; apt-get download; dpkg -x);
#   * NumPy, ml_dtypes and the test dependencies as aarch64 wheels from PyPI (uv, for
#     aarch64-manylinux_2_36 = Debian 12's glibc), in the sysroot's dist-packages;
#   * the ortckpt abi3 aarch64 wheel from DIST, installed afresh on every run.
# sys.executable is a wrapper script that re-enters qemu, so the tests that start Python
# subprocesses (CLI, crash and memory tests) run them on the emulated interpreter as well.
# The tests run: ARM64_TESTS below (ORTCKPT_ARM64_TESTS="tests" runs the whole suite; expect well
# over an hour of emulation). What the subset leaves out, and why, is in docs/index.md (## Install).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
dist=${1:-$repo/dist/aarch64}
shift || true
cache=${ORTCKPT_ARM64_DIR:-$repo/.arm64}
uv="$repo/.venv/bin/uv"
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
sysroot="$cache/sysroot"

wheel=$(ls "$dist"/ortckpt-*-cp311-abi3-*_aarch64.whl 2>/dev/null | head -1 || true)
if [ -z "$wheel" ]; then
  echo "error: no ortckpt abi3 aarch64 wheel in $dist (run scripts/build_wheels.sh first)" >&2
  exit 1
fi

# The set-up needs Debian's package tools and root (apt-get install, dpkg --add-architecture) unless
# everything is in the cache already; elsewhere the run is skipped, saying so.
if [ ! -f "$cache/sysroot/.debs" ] || ! command -v qemu-aarch64-static >/dev/null; then
  if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null || [ "$(id -u)" != 0 ]; then
    echo "skip: the aarch64 run needs root on a Debian/Ubuntu machine (apt-get, dpkg) to set up qemu-user-static and its sysroot"
    exit 0
  fi
fi

apt_get() {  # waits for another apt/dpkg run instead of failing on its lock
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 "$@"
}

if ! command -v qemu-aarch64-static >/dev/null; then
  echo "== installing qemu-user-static"
  apt_get update -qq
  apt_get install -y -qq qemu-user-static >/dev/null
fi

# Debian 12's CPython 3.11 and every library it, NumPy's and our wheels load (libgcc_s, libstdc++
# are outside the manylinux wheels by policy). The readline/ncurses/nsl/krb5 libraries serve
# stdlib modules that are not imported here but keep the sysroot a faithful Debian install.
debs=(python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libc6 libgcc-s1 libstdc++6
  zlib1g libexpat1 libssl3 libffi8 libbz2-1.0 liblzma5 libsqlite3-0 libcrypt1 libdb5.3 libuuid1
  libncursesw6 libtinfo6 libreadline8 libnsl2 libtirpc3 libgssapi-krb5-2 libkrb5-3 libk5crypto3
  libcom-err2 libkrb5support0 libkeyutils1 libzstd1)
missing=()
for deb in "${debs[@]}"; do
  ls "$cache/debs/${deb}_"*_arm64.deb >/dev/null 2>&1 || missing+=("$deb:arm64")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== downloading ${#missing[@]} Debian arm64 packages into $cache/debs"
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    dpkg --add-architecture arm64
    apt_get update -qq
  elif ! apt-cache show python3.11-minimal:arm64 >/dev/null 2>&1; then
    apt_get update -qq
  fi
  mkdir -p "$cache/debs"
  # apt-get download runs as root here: its "unsandboxed" warning is expected, not an error
  (cd "$cache/debs" && apt_get download -qq "${missing[@]}" 2>&1 | grep -v 'unsandboxed' || true)
  for deb in "${debs[@]}"; do
    ls "$cache/debs/${deb}_"*_arm64.deb >/dev/null 2>&1 || { echo "error: $deb:arm64 not downloaded" >&2; exit 1; }
  done
fi

# The sysroot is unpacked again whenever the set of .deb files changes.
deb_key=$(cd "$cache/debs" && ls ./*.deb | sha256sum | cut -c1-16)
if [ "$(cat "$sysroot/.debs" 2>/dev/null || true)" != "$deb_key" ]; then
  echo "== unpacking the sysroot into $sysroot"
  rm -rf "$sysroot"
  mkdir -p "$sysroot"
  for deb in "$cache/debs"/*.deb; do
    dpkg -x "$deb" "$sysroot"
  done
  echo "$deb_key" >"$sysroot/.debs"
fi

# The interpreter as the tests see it: a script beside the real binary, so CPython finds its
# standard library from it, and sys.executable (qemu's -0 sets argv[0]) re-enters the emulator.
python="$sysroot/usr/bin/python3"
cat >"$python" <<EOF
#!/bin/sh
exec qemu-aarch64-static -L "$sysroot" -0 "\$0" "$sysroot/usr/bin/python3.11" "\$@"
EOF
chmod +x "$python"

# Third-party packages: aarch64 wheels only (nothing is compiled), for Debian 12's glibc 2.36.
# onnx: the ONNX model functions and the ORT 1.15 folder conversions (protobuf comes with it);
# safetensors: the conversions to and from safetensors files;
# psutil: the memory-bound tests; blake3: the shared-directory tests forge save journals with it.
packages=(numpy ml_dtypes onnx safetensors pytest hypothesis psutil blake3)
site="$sysroot/usr/lib/python3/dist-packages"
if [ "$(cat "$site/.packages" 2>/dev/null || true)" != "${packages[*]}" ]; then
  echo "== installing ${packages[*]} (aarch64 wheels) into $site"
  rm -rf "$site"
  "$uv" pip install -q --cache-dir "$cache/uv" --target "$site" --only-binary :all: \
    --python-platform aarch64-manylinux_2_36 --python-version 3.11 "${packages[@]}"
  echo "${packages[*]}" >"$site/.packages"
fi

# ortckpt itself: the wheel under test, in its own directory so that every run installs it afresh.
local_site="$sysroot/usr/local/lib/python3.11/dist-packages"
rm -rf "$local_site"
"$uv" pip install -q --cache-dir "$cache/uv" --target "$local_site" --no-deps --only-binary :all: \
  --python-platform aarch64-manylinux_2_36 --python-version 3.11 "$wheel"

echo "== aarch64 under QEMU: $(basename "$wheel")"
"$python" - <<'EOF'
import platform, sys
import ml_dtypes, numpy, ortckpt, ortckpt._native as native
assert platform.machine() == "aarch64", platform.machine()
assert sys.byteorder == "little"
assert "/usr/local/lib/python3.11/dist-packages/" in native.__file__, native.__file__
print(f"CPython {platform.python_version()} {platform.machine()}, numpy {numpy.__version__}, "
      f"ml_dtypes {ml_dtypes.__version__}, ortckpt {ortckpt.__version__} from {native.__file__}")
EOF

# The subset emulation runs in minutes on CI's 2 cores; docs/index.md names what it leaves out.
ARM64_TESTS=(
  # reading: ORT's files, the public API, zero-copy and unaligned views, versions 1 and 1.15
  tests/test_corpus.py tests/test_api.py tests/test_lazy_loading.py tests/test_bulk_read.py
  tests/test_compat_v1.py tests/test_compat_legacy.py tests/test_compat_api.py
  # untrusted input: malformed files, special files, the file protocol, bytes changing mid-read
  tests/test_malformed.py tests/test_special_files.py tests/test_file_protocol.py
  tests/test_mutation_race.py
  # writing, converting, averaging, the command line, threads
  tests/test_save_options.py tests/test_properties_hypothesis.py tests/formats/test_convert.py
  tests/federated/test_average.py tests/test_cli.py tests/test_threads.py tests/test_concurrency.py
  # ORT 1.19.2 (native, in its x86-64 side venv) and the emulated aarch64 ortckpt, both ways
  tests/ort/test_ortckpt_to_ort.py tests/ort/test_ort_to_ortckpt.py
)
read -r -a tests <<<"${ORTCKPT_ARM64_TESTS:-${ARM64_TESTS[*]}}"
# -p no:cacheprovider: the emulated run leaves the repository's .pytest_cache to the native runs
"$python" -m pytest -q -p no:cacheprovider "${tests[@]}" "$@"
