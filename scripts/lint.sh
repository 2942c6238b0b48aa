#!/usr/bin/env bash
# Every lint, fast and first: Rust format and clippy (core, binding, fuzz harness), ruff (lint and
# format), mypy --strict, and stubtest of python/ortckpt/_native.pyi against the built module.
# Needs scripts/setup.sh to have run (the linters and the built module live in .venv).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
export PATH="$repo/.venv/bin:$PATH"

echo "== cargo fmt / clippy"
cargo fmt --all --check
cargo clippy --all-targets -- -D warnings
# The browser build: the core without its file layer, and rust/wasm, for wasm32 (scripts/build_web.sh).
rustup target add wasm32-unknown-unknown >/dev/null 2>&1 || true
cargo clippy --target wasm32-unknown-unknown -p ortckpt-core --no-default-features -- -D warnings
cargo clippy --target wasm32-unknown-unknown -p ortckpt-wasm --all-targets -- -D warnings
cargo fmt --manifest-path fuzz/Cargo.toml --all --check
(cd fuzz && cargo clippy --all-targets -- -D warnings)
echo "== ruff"
ruff check python tests benches scripts examples fuzz/python
ruff format --check python tests benches scripts examples fuzz/python
echo "== mypy"
mypy python/ortckpt
echo "== stubtest (_native.pyi against the built module)"
python -m mypy.stubtest ortckpt._native --mypy-config-file pyproject.toml --allowlist scripts/stubtest-allowlist.txt
