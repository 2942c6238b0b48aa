# Sourced by the set-up scripts that install Debian packages for the tests (setup_browser.sh,
# setup_nginx.sh): `apt_install WHAT PACKAGE...` installs the packages as root (or with sudo),
# never starting a service they bring (policy-rc.d: the tests start their own, on 127.0.0.1).
# Not root and no sudo: it says what to install for WHAT (the tests then skip with
# that reason). Returns 2 then, and apt-get's status when it fails.
apt_install() {
  local what=$1 as_root
  shift
  if [ "$(id -u)" = 0 ]; then
    as_root=()
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    as_root=(sudo)
  else
    echo "$(basename "$0"): not root: install $* to run $what" >&2
    return 2
  fi
  echo "== apt-get install $*"
  export DEBIAN_FRONTEND=noninteractive
  "${as_root[@]}" apt-get update -qq
  local added_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | "${as_root[@]}" tee /usr/sbin/policy-rc.d >/dev/null
    "${as_root[@]}" chmod +x /usr/sbin/policy-rc.d
    added_policy=1
  fi
  local status=0
  "${as_root[@]}" apt-get install -y -qq --no-install-recommends "$@" >/dev/null || status=$?
  if [ "$added_policy" = 1 ]; then
    "${as_root[@]}" rm -f /usr/sbin/policy-rc.d
  fi
  return "$status"
}
