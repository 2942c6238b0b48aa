#!/usr/bin/env bash
# Builds the browser checkpoint viewer's compiled files: the core for wasm32 (rust/wasm, without the
# file layer) and its JavaScript bindings (wasm-bindgen --target web) into web/pkg/ (build output,
# not committed). Installs what it needs: the wasm32 target (rustup) and wasm-bindgen-cli at exactly
# the version of the wasm-bindgen crate in Cargo.lock (the two must match), skipped when that
# version is already on PATH.
# --test also runs the JS API tests (rust/wasm/tests/web.rs, wasm-bindgen-test) in headless
# Chromium through wasm-bindgen-test-runner and chromedriver (skipped, saying so, without them).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
rustup target add wasm32-unknown-unknown >/dev/null 2>&1 || rustup target list --installed | grep -qx wasm32-unknown-unknown
version=$(awk '/^name = "wasm-bindgen"$/ {getline; gsub(/version = |"/, ""); print; exit}' Cargo.lock)
if [ -z "$version" ]; then
  echo "build_web.sh: no wasm-bindgen in Cargo.lock" >&2
  exit 1
fi
export PATH="$HOME/.cargo/bin:$PATH"
if ! wasm-bindgen --version 2>/dev/null | grep -qx "wasm-bindgen $version"; then
  echo "== cargo install wasm-bindgen-cli $version"
  # No default features: they are TLS for downloading, which neither wasm-bindgen nor the test
  # runner (chromedriver on loopback) needs, and rustls is most of the compile time. --locked first
  # (the CLI's own lock file); when the registry no longer offers one of its pins (seen here:
  # webpki-roots 1.0.11), its dependencies are resolved afresh instead.
  cargo install wasm-bindgen-cli --version "$version" --no-default-features --locked \
    || cargo install wasm-bindgen-cli --version "$version" --no-default-features
fi
echo "== wasm32 build of the core (rust/wasm) and its bindings into web/pkg/"
cargo build --target wasm32-unknown-unknown --release -p ortckpt-wasm
wasm-bindgen --target web --out-dir web/pkg target/wasm32-unknown-unknown/release/ortckpt_wasm.wasm
ls -l web/pkg/ortckpt_wasm_bg.wasm
if [ "${1:-}" = --test ]; then
  chromedriver=${CHROMEDRIVER:-$(command -v chromedriver || true)}
  if [ -z "$chromedriver" ] || ! command -v chromium >/dev/null; then
    echo "== SKIPPED wasm-bindgen tests: no chromium / chromedriver (scripts/setup_browser.sh installs them)"
  else
    echo "== wasm-bindgen tests of the JS API in headless Chromium (rust/wasm/tests/web.rs)"
    # The runner reads rust/wasm/webdriver.json (headless, no sandbox: CI runs as root).
    CHROMEDRIVER=$chromedriver CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner \
      cargo test --target wasm32-unknown-unknown --release -p ortckpt-wasm
  fi
fi
