#!/usr/bin/env bash
# Installs everything the test suite needs, idempotently: Debian packages for the real
# peers and clients, and PyPI client libraries. Safe to run again; skips what is present.
set -euo pipefail

need_apt=()
have() { dpkg -s "$1" >/dev/null 2>&1; }
for pkg in beanstalkd php-cli php-pda-pheanstalk python3-pip; do
  have "$pkg" || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi
# The Debian beanstalkd service must not hold port 11300 during tests.
if command -v systemctl >/dev/null 2>&1; then systemctl stop beanstalkd >/dev/null 2>&1 || true; fi

PY=${PYTHON:-python3}
py_need=()
$PY -c 'import greenstalk' 2>/dev/null || py_need+=(greenstalk)
$PY -c 'import pystalk' 2>/dev/null || py_need+=(pystalk)
$PY -c 'import pytest' 2>/dev/null || py_need+=(pytest)
if [ ${#py_need[@]} -gt 0 ]; then
  echo "setup: installing PyPI packages: ${py_need[*]}"
  $PY -m pip install -q "${py_need[@]}"
fi
echo "setup: done"
