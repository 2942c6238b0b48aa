#!/usr/bin/env bash
# Installs what the browser tests need: Debian's chromium and chromium-driver (headless Chromium
# and its WebDriver). No-op when both are on PATH. Needs root (CI runs as root) or sudo; elsewhere
# it says what to install, and the browser tests skip with that reason.
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  exit 0
fi
if [ "$(id -u)" = 0 ]; then
  as_root=()
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  as_root=(sudo)
else
  echo "setup_browser.sh: not root: install chromium and chromium-driver to run the browser tests" >&2
  exit 0
fi
echo "== apt-get install chromium chromium-driver"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
chromium --version
