#!/usr/bin/env bash
# Installs what the remote-read tests serve checkpoints with: Debian's nginx-light (started by the
# tests on 127.0.0.1 with their own configuration, never as a system service). No-op when nginx is
# installed. Needs root (CI runs as root) or sudo; elsewhere it says what to install, and the nginx
# tests skip with that reason.
set -euo pipefail
if command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; then
  exit 0
fi
source "$(dirname "$0")/apt_install.sh"
apt_install "the remote-read tests against nginx" nginx-light || {
  status=$?
  [ "$status" = 2 ] && exit 0 # not root: said what to install
  exit "$status"
}
/usr/sbin/nginx -v
