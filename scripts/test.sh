#!/usr/bin/env bash
# The full test command, what CI runs (.ci/run): every lint (scripts/lint.sh --full: also the fuzz
# harness, wasm32 and macOS clippy, actionlint and zizmor); the Rust tests and `cargo package` of
# the core; a short fuzzing run; the docs site (mkdocs --strict); the browser viewer; the portable
# wheels (Linux x86-64 and aarch64, macOS x86-64 and arm64; glibc floor checked, installed across
# every available CPython x lowest/newest NumPy; the aarch64 ones tested under QEMU by
# scripts/test_arm64.sh); the lowest-direct dependencies run; and the whole pytest suite (the ORT
# and slow tiers included), last; the aggregation's Rust and Python tests once more on the plain
# loops (ORTCKPT_SIMD=plain). Arguments go to the last pytest.
# Unlike the everyday command (scripts/check.sh) it installs things outside the repository:
# rustup targets, cargo tools, and (as root) Debian packages; docs/development.md lists them.
# ORTCKPT_SKIP_WHEELS=1 skips the wheel build, the wheel matrix and the lowest-direct run.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
bash scripts/setup.sh
ORTCKPT_ORT_VENV=${ORTCKPT_ORT_VENV:-$repo/.ort-venv}
export ORTCKPT_ORT_VENV
bash scripts/setup_ort_env.sh "$ORTCKPT_ORT_VENV" >/dev/null
# ORT 1.17.3, the last release that reads and writes format version 1 (tests/ort/test_ort_releases.py)
ORTCKPT_ORT117_VENV=${ORTCKPT_ORT117_VENV:-$repo/.ort-venv-1.17}
export ORTCKPT_ORT117_VENV
bash scripts/setup_ort_env.sh --release 1.17.3 "$ORTCKPT_ORT117_VENV" >/dev/null
# The newest onnxruntime from PyPI, for ORT adapters (tests/ort/test_ort_adapters.py)
ORTCKPT_ORT_CURRENT_VENV=${ORTCKPT_ORT_CURRENT_VENV:-$repo/.ort-venv-current}
export ORTCKPT_ORT_CURRENT_VENV
bash scripts/setup_ort_env.sh --release current "$ORTCKPT_ORT_CURRENT_VENV" >/dev/null
# flatc (for the generated-code freshness test) and the linters live in .venv.
export PATH="$repo/.venv/bin:$PATH"
# The targets the full run lints and builds for: the browser build (wasm32), the aarch64 Linux
# wheels, and the macOS wheels (cross-built with zig; clippy checks the core's cfgs there).
rustup target add wasm32-unknown-unknown aarch64-unknown-linux-gnu x86_64-apple-darwin aarch64-apple-darwin

# Every lint first: scripts/lint.sh --full (cargo fmt/clippy for the core, the binding and the fuzz
# harness, for every target above; ruff check and format; actionlint and zizmor on the workflows;
# mypy --strict; stubtest of _native.pyi against the built module).
bash scripts/lint.sh --full
echo "== cargo test"
cargo test -p ortckpt-core
# The core's SIMD level is the CPU's unless capped (rust/core/src/simd.rs); the aggregation's Rust
# tests run once more on the plain loops, whatever this machine has.
echo "== cargo test: aggregation on the plain loops (ORTCKPT_SIMD=plain)"
ORTCKPT_SIMD=plain cargo test -p ortckpt-core -- aggregate simd values
echo "== cargo package -p ortckpt-core (the crate as crates.io would receive it, built alone)"
cargo package -p ortckpt-core --locked --allow-dirty
echo "== fuzz harness: oracle tests on the seeds and past findings"
cargo test --manifest-path fuzz/Cargo.toml
# A short coverage-guided fuzzing run of the core (libFuzzer + ASan; ORTCKPT_FUZZ_SECONDS=0 skips).
fuzz_seconds=${ORTCKPT_FUZZ_SECONDS:-30}
if [ "$fuzz_seconds" -gt 0 ]; then
  echo "== fuzz (${fuzz_seconds}s per target)"
  bash scripts/fuzz.sh "$fuzz_seconds"
fi
echo "== docs: mkdocs build --strict, any warning fails (scripts/build_docs.sh)"
bash scripts/build_docs.sh
# The browser viewer: Debian's chromium + chromium-driver, the core for wasm32 and its bindings
# (web/pkg/), and the JS API's wasm-bindgen tests in headless Chromium; pytest's tests/test_web.py
# then drives the viewer itself.
echo "== nginx (Debian's nginx-light) for the remote-read tests (scripts/setup_nginx.sh)"
bash scripts/setup_nginx.sh
echo "== browser: wasm32 build and JS API tests in headless Chromium (scripts/build_web.sh --test)"
bash scripts/setup_browser.sh
bash scripts/build_web.sh --test
if [ "${ORTCKPT_SKIP_WHEELS:-0}" != 1 ]; then
  echo "== wheels: manylinux2014 (glibc 2.17) abi3 + cp310, sdist (scripts/build_wheels.sh)"
  bash scripts/build_wheels.sh dist
  echo "== wheel matrix: every CPython x lowest/newest NumPy (scripts/test_wheels.sh)"
  bash scripts/test_wheels.sh dist
  echo "== aarch64 wheel on Debian's arm64 CPython 3.11 under QEMU user-mode (scripts/test_arm64.sh)"
  bash scripts/test_arm64.sh dist/aarch64
  echo "== lowest direct dependencies: declared floors, the suite but its slow tier (scripts/test_lowest.sh)"
  DIST=dist bash scripts/test_lowest.sh
fi
echo "== pytest: the aggregation tests on the plain loops (ORTCKPT_SIMD=plain)"
ORTCKPT_SIMD=plain python -m pytest -q -m "not slow" tests/federated/test_average*.py tests/federated/test_round*.py tests/test_simd_levels.py
echo "== pytest"  # last, so its summary closes the output
python -m pytest -q "$@"
