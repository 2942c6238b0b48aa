#!/usr/bin/env bash
# Every lint, fast and first: Rust format and clippy (core, binding), ruff (lint and format),
# actionlint and zizmor (the GitHub workflows), mypy --strict, and stubtest of
# python/ortckpt/_native.pyi against the built module. Installs nothing.
# `--full` (scripts/test.sh) also lints the fuzz harness (its own crate graph: libFuzzer's
# build), the crates' API docs (cargo doc, warnings denied) and the other targets, each one
# rustup has (scripts/test.sh adds them: wasm32 for the browser build, the two macOS targets; a
# missing one is skipped with a message).
# Needs scripts/setup.sh to have run (the linters and the built module live in .venv).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
export PATH="$repo/.venv/bin:$PATH"
full=0
[ "${1:-}" = --full ] && full=1

has_target() { rustup target list --installed 2>/dev/null | grep -qx "$1"; }

echo "== cargo fmt / clippy"
cargo fmt --all --check
cargo fmt --manifest-path fuzz/Cargo.toml --all --check
cargo clippy --all-targets -- -D warnings
if [ "$full" = 1 ]; then
# The browser build: the core without its file layer, and rust/wasm, for wasm32 (scripts/build_web.sh).
if has_target wasm32-unknown-unknown; then
  cargo clippy --target wasm32-unknown-unknown -p ortckpt-core --no-default-features -- -D warnings
  cargo clippy --target wasm32-unknown-unknown -p ortckpt-wasm --all-targets -- -D warnings
else
  echo "lint: skipped clippy for wasm32 (target not installed; scripts/test.sh adds it)"
fi
# macOS: the core and the binding compile there, every platform-specific call behind its cfg
# (rust/core/src/platform.rs); the wheels are cross-built by scripts/build_wheels.sh. blake3's
# build script compiles C for the target: zig (the ziglang package in .venv) is that C compiler,
# behind a wrapper that drops the --target= cc-rs adds (zig reads its own -target).
zig_cc() {  # rust target -> a C compiler for it, in a temporary directory
  local dir arch=${1%%-*}
  dir=$(mktemp -d)
  {
    echo '#!/bin/sh'
    echo 'for a in "$@"; do shift; case "$a" in --target=*) ;; *) set -- "$@" "$a" ;; esac; done'
    echo "exec \"$repo/.venv/bin/python\" -m ziglang cc -target $arch-macos \"\$@\""
  } >"$dir/cc"
  chmod +x "$dir/cc"
  echo "$dir/cc"
}
for target in x86_64-apple-darwin aarch64-apple-darwin; do
  if has_target "$target"; then
    # the binding with abi3: pyo3 then needs no Python of the target to cross-compile
    env "CC_${target//-/_}=$(zig_cc "$target")" \
      cargo clippy --target "$target" -p ortckpt-core -p ortckpt-python --features ortckpt-python/abi3 -- -D warnings
  else
    echo "lint: skipped clippy for $target (target not installed; scripts/test.sh adds it)"
  fi
done
(cd fuzz && cargo clippy --all-targets -- -D warnings)
# the API docs: no intra-doc link that rustdoc cannot resolve or that points at a private item
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -q -p ortckpt-core -p ortckpt-python -p ortckpt-wasm
fi
echo "== ruff"
ruff check python tests benches scripts examples fuzz/python
ruff format --check python tests benches scripts examples fuzz/python
echo "== actionlint / zizmor (.github/workflows)"
actionlint
zizmor --offline --persona=pedantic --no-progress .github/workflows
echo "== mypy"
mypy python/ortckpt
echo "== stubtest (_native.pyi against the built module)"
python -m mypy.stubtest ortckpt._native --mypy-config-file pyproject.toml --allowlist scripts/stubtest-allowlist.txt
