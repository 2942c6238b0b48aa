#!/usr/bin/env bash
# Installs what the browser tests need: Debian's chromium and chromium-driver (headless Chromium
# and its WebDriver). No-op when both are on PATH. Needs root (CI runs as root) or sudo; elsewhere
# it says what to install, and the browser tests skip with that reason.
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  exit 0
fi
source "$(dirname "$0")/apt_install.sh"
apt_install "the browser tests" chromium chromium-driver || {
  status=$?
  [ "$status" = 2 ] && exit 0 # not root: said what to install
  exit "$status"
}
chromium --version
