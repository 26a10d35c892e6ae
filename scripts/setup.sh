#!/usr/bin/env bash
# Installs everything the test suite needs, idempotently: Debian packages for the real
# peers and clients, and PyPI client libraries. Safe to run again; skips what is present,
# and runs `apt-get update` only when a Debian package is missing. Debian 12, as root
# (or with sudo available).
#
#   Debian: beanstalkd (reference server), php-cli + php-pda-pheanstalk (PHP client)
#   Debian: gearman-tools (gearman, gearadmin), gearman-job-server (reference gearmand),
#           php-gearman (PHP client)
#   Debian: mariadb-server (a real MariaDB for the jobd tests; started per test in a temp dir)
#   Debian: postgresql (a real PostgreSQL for the --storage postgres:// tests; a cluster made
#           with initdb in a temp dir per test session, run as the package's postgres user)
#   Debian: chromium + chromium-driver (the dashboard's headless browser tests), openssl (the
#           TLS tests make a CA and a certificate with its CLI)
#   PyPI:   greenstalk, pystalk (Python clients), gearman3 (Gearman client), pytest, pytest-timeout,
#           requests (HTTP API tests), pyzmq (libzmq peers for the 14/WMP tests),
#           pymysql (the jobd benchmark)
#           selenium (drives chromium through chromium-driver), httpx (the Python client's
#           HTTP library)
#   Local:  the Python client itself (`pip install ./clients/python`, package `jobyard`)
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi

PY=${PYTHON:-python3}

# Runs a command quietly; shows its output only if it fails.
quietly() {
  local log
  log=$(mktemp)
  if ! "$@" >"$log" 2>&1; then
    echo "setup: failed: $*" >&2
    cat "$log" >&2
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
}

have_deb() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep '^install ok installed$' >/dev/null; }

need_apt=()
for pkg in beanstalkd php-cli php-pda-pheanstalk gearman-tools gearman-job-server php-gearman mariadb-server \
  postgresql chromium chromium-driver openssl; do
  have_deb "$pkg" || need_apt+=("$pkg")
done
# pip for the Python that runs the tests (a pyenv or venv Python brings its own)
if ! $PY -m pip --version >/dev/null 2>&1; then
  have_deb python3-pip || need_apt+=(python3-pip)
fi
# Node.js runs the Node client's tests (clients/node); any Node >= 20 on the PATH will do.
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  quietly $SUDO apt-get update -qq
  quietly $SUDO env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi
# The Debian beanstalkd service must not hold port 11300 during tests.
if command -v systemctl >/dev/null 2>&1; then
  $SUDO systemctl stop beanstalkd >/dev/null 2>&1 || true
  $SUDO systemctl disable beanstalkd >/dev/null 2>&1 || true
  # Likewise Debian's gearmand (gearman-job-server) must not hold port 4730.
  $SUDO systemctl stop gearman-job-server >/dev/null 2>&1 || true
  $SUDO systemctl disable gearman-job-server >/dev/null 2>&1 || true
  # The jobd tests start their own MariaDB; the system one is not needed.
  $SUDO systemctl stop mariadb >/dev/null 2>&1 || true
  $SUDO systemctl disable mariadb >/dev/null 2>&1 || true
  # The PostgreSQL tests start their own cluster; the system one is not needed.
  $SUDO systemctl stop postgresql >/dev/null 2>&1 || true
  $SUDO systemctl disable postgresql >/dev/null 2>&1 || true
fi

py_need=()
$PY -c 'import greenstalk' 2>/dev/null || py_need+=(greenstalk)
$PY -c 'import pystalk' 2>/dev/null || py_need+=(pystalk)
$PY -c 'import pytest' 2>/dev/null || py_need+=(pytest)
$PY -c 'import gearman' 2>/dev/null || py_need+=(gearman3)
$PY -c 'import requests' 2>/dev/null || py_need+=(requests)
$PY -c 'import zmq' 2>/dev/null || py_need+=(pyzmq)
$PY -c 'import pytest_timeout' 2>/dev/null || py_need+=(pytest-timeout)
# Parses /metrics in the jobd metrics test (tests/jobd/test_jobd_serve.py).
$PY -c 'import prometheus_client' 2>/dev/null || py_need+=(prometheus-client)
# MySQL client for the jobd benchmark (bench/jobd.sh).
$PY -c 'import pymysql' 2>/dev/null || py_need+=(pymysql)
$PY -c 'import selenium' 2>/dev/null || py_need+=(selenium)
$PY -c 'import httpx' 2>/dev/null || py_need+=(httpx)
# The Prometheus project's own parser reads /metrics in the tests.
$PY -c 'import prometheus_client' 2>/dev/null || py_need+=(prometheus-client)
if [ ${#py_need[@]} -gt 0 ]; then
  echo "setup: installing PyPI packages: ${py_need[*]}"
  # Debian's own python3 is "externally managed" (PEP 668); these test-only client
  # libraries do not clash with any Debian package, so allow the install there.
  user_flag=()
  if [ "$(id -u)" -ne 0 ] && ! $PY -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)'; then
    user_flag=(--user)
  fi
  quietly env PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    $PY -m pip install -q "${user_flag[@]}" "${py_need[@]}"
fi
# The Python client from this checkout (its tests import its src/ directly; the install is
# for programs on this machine). Looked for from / so that nothing in the checkout passes for it.
if ! (cd / && $PY -c 'import jobyard.aio') 2>/dev/null; then
  echo "setup: installing the Python client (clients/python)"
  user_flag=()
  if [ "$(id -u)" -ne 0 ] && ! $PY -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)'; then
    user_flag=(--user)
  fi
  quietly env PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    $PY -m pip install -q "${user_flag[@]}" "$(dirname "$0")/../clients/python"
fi

# Fail here, clearly, rather than in the middle of the tests.
$PY -c 'import greenstalk, pystalk, pytest, pytest_timeout, requests, selenium, zmq, prometheus_client, httpx' \
  || { echo "setup: Python packages still missing for $PY" >&2; exit 1; }
command -v php >/dev/null || { echo "setup: php is missing" >&2; exit 1; }
command -v node >/dev/null || { echo "setup: node is missing" >&2; exit 1; }
command -v gearman >/dev/null && command -v gearadmin >/dev/null \
  || { echo "setup: the gearman/gearadmin tools are missing" >&2; exit 1; }
php -r 'exit(extension_loaded("gearman") ? 0 : 1);' || { echo "setup: php-gearman is not loaded" >&2; exit 1; }
php -r 'require "Pheanstalk/autoload.php"; exit(class_exists("Pheanstalk\\Pheanstalk") ? 0 : 1);' \
  || { echo "setup: Pheanstalk is not loadable from PHP" >&2; exit 1; }
command -v chromium >/dev/null && command -v chromedriver >/dev/null \
  || { echo "setup: chromium or chromedriver is missing" >&2; exit 1; }
command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] \
  || { echo "setup: mariadbd is missing" >&2; exit 1; }
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
  || { echo "setup: PostgreSQL's initdb is missing" >&2; exit 1; }
echo "setup: done"
