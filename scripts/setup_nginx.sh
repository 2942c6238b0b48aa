#!/usr/bin/env bash
# Installs what the remote-read tests serve checkpoints with: Debian's nginx-light (started by the
# tests on 127.0.0.1 with their own configuration, never as a system service). No-op when nginx is
# installed. Needs root (CI runs as root) or sudo; elsewhere it says what to install, and the nginx
# tests skip with that reason.
set -euo pipefail
if command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; then
  exit 0
fi
if [ "$(id -u)" = 0 ]; then
  as_root=()
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  as_root=(sudo)
else
  echo "setup_nginx.sh: not root: install nginx-light to run the remote-read tests against nginx" >&2
  exit 0
fi
echo "== apt-get install nginx-light"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
# policy-rc.d 101: the package's service is not started (the tests start their own nginx)
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | "${as_root[@]}" tee /usr/sbin/policy-rc.d >/dev/null
  "${as_root[@]}" chmod +x /usr/sbin/policy-rc.d
  trap '"${as_root[@]}" rm -f /usr/sbin/policy-rc.d' EXIT
fi
"${as_root[@]}" apt-get install -y -qq --no-install-recommends nginx-light >/dev/null
/usr/sbin/nginx -v
