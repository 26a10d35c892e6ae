#!/usr/bin/env bash
# The Debian package tested as a user would use it, on this machine, run on purpose (not in
# CI: it needs a release build, 5-8 minutes on 2 cores, and root):
#
#   sudo scripts/test_deb.sh
#
# Builds two versions with scripts/build-deb.sh, then: `apt install` (beside Debian's own
# beanstalkd and gearman-job-server when installed), the units through `systemd-analyze
# verify`, the unit's ExecStart run as the jobyard user serving a beanstalkd client (also
# socket-activated as jobyard.socket names it), an upgrade that keeps a changed jobyard.toml
# and a queued job, `apt remove` (config, data and user stay), `apt purge` (all gone).
# Refuses to run if jobyard is already installed. Honours CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

unit_dir=/lib/systemd/system
config=/etc/jobyard/jobyard.toml
data_dir=/var/lib/jobyard
server_pid=""
server_log="$(mktemp)"

fail() {
  echo "test_deb: FAIL: $*" >&2
  [[ -s "$server_log" ]] && sed 's/^/  server: /' "$server_log" >&2
  exit 1
}
ok() { echo "test_deb: ok: $*"; }
check() {
  local what="$1"
  shift
  if "$@"; then ok "$what"; else fail "$what"; fi
}
stop_server_on_exit() {
  if [[ -n "$server_pid" ]]; then kill "$server_pid" 2>/dev/null || true; fi
  rm -f "$server_log"
}
trap stop_server_on_exit EXIT

# beanstalk PORT REQUEST...: sends each request on one connection, prints each reply.
beanstalk() {
  python3 - "$@" <<'PY'
import socket, sys

def read_reply(conn, buf):
    while b"\r\n" not in buf:
        buf += conn.recv(65536)
    line, buf = buf.split(b"\r\n", 1)
    words = line.split()
    if words and words[0] in (b"FOUND", b"RESERVED"):
        size = int(words[2]) + 2
        while len(buf) < size:
            buf += conn.recv(65536)
        line += b" " + buf[: size - 2]
        buf = buf[size:]
    return line.decode(), buf

with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10) as conn:
    buf = b""
    for request in sys.argv[2:]:
        conn.sendall(request.encode() + b"\r\n")
        reply, buf = read_reply(conn, buf)
        print(reply)
PY
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_for_port() {
  local port="$1"
  for _ in $(seq 100); do
    kill -0 "$server_pid" 2>/dev/null || fail "the server exited before listening on $port"
    if python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null; then
      return 0
    fi
    sleep 0.2
  done
  fail "nothing listens on $port after 20 s"
}

# start_server PREFIX...: the unit's ExecStart as the unit's user, from / as systemd would.
start_server() {
  local exec_start user
  exec_start="$(sed -n 's/^ExecStart=//p' "$unit_dir/jobyard.service")"
  user="$(sed -n 's/^User=//p' "$unit_dir/jobyard.service")"
  # shellcheck disable=SC2086 # ExecStart is a command line to split into words
  (cd / && exec "$@" setpriv --reuid="$user" --regid="$user" --init-groups $exec_start) \
    >"$server_log" 2>&1 &
  server_pid=$!
}

# SIGTERM is the unit's stop: graceful, exit 0.
stop_server() {
  kill -TERM "$server_pid"
  local status=0
  wait "$server_pid" || status=$?
  server_pid=""
  [[ "$status" == 0 ]] || fail "the server exited $status on SIGTERM"
}

build_both_versions() {
  out="${CARGO_TARGET_DIR:-$PWD/target}/debian-test"
  rm -rf "$out"
  DEB_OUT_DIR="$out" nice -n 10 bash scripts/build-deb.sh
  v1="$(dpkg-deb --field "$(ls "$out"/jobyard_*.deb)" Version)"
  v2="$v1+upgrade1"
  DEB_OUT_DIR="$out" DEB_VERSION="$v2" nice -n 10 bash scripts/build-deb.sh
}

# deb NAME VERSION: the path of a package built above.
deb() { echo "$out/${1}_${2}_$(dpkg --print-architecture).deb"; }

installed_version() { dpkg-query -W -f='${Status} ${Version}' jobyard 2>/dev/null || true; }

check_install() {
  local debian_ones=""
  for p in beanstalkd gearman-job-server; do
    if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" == "install ok installed" ]]; then
      debian_ones+=" $p"
    fi
  done
  echo "test_deb: Debian's own packages installed beside it:${debian_ones:- none}"
  apt-get install -y "$(deb jobyard "$v1")" "$(deb jobyard-dbgsym "$v1")" </dev/null
  check "installed $v1" test "$(installed_version)" == "install ok installed $v1"
  check "user jobyard exists" id jobyard
  check "$data_dir belongs to jobyard" test "$(stat -c %U:%G "$data_dir")" == jobyard:jobyard
  check "jobyard.service enabled" test -L /etc/systemd/system/multi-user.target.wants/jobyard.service
  check "jobyard.socket not enabled" test ! -e /etc/systemd/system/sockets.target.wants/jobyard.socket
  check "binary stripped" bash -c "! readelf -S /usr/bin/jobyard | grep -q debug_info"
  check "debug info found through the build id" bash -c \
    "gdb -batch -ex 'info line jobyard::main' /usr/bin/jobyard 2>&1 | grep -q 'main.rs'"
  check "man page" man -w jobyard-serve
  check "bash completion" test -s /usr/share/bash-completion/completions/jobyard
  check "drop-in beanstalkd name" bash -c \
    "/usr/lib/jobyard/bin/beanstalkd -v | grep -q 'beanstalkd 1.12 (jobyard'"
  if [[ "$debian_ones" == *beanstalkd* ]]; then
    check "/usr/bin/beanstalkd still Debian's" test "$(dpkg-query -S /usr/bin/beanstalkd)" \
      == "beanstalkd: /usr/bin/beanstalkd"
  fi
}

check_units() {
  check "systemd-analyze verify" \
    systemd-analyze verify "$unit_dir/jobyard.service" "$unit_dir/jobyard.socket"
}

# The admin's change: test ports, Gearman off; kept across the upgrade.
change_config() {
  port="$(free_port)"
  http_port="$(free_port)"
  cat >>"$config" <<EOF
# changed by test_deb.sh
beanstalk_listen = "127.0.0.1:$port"
gearman_listen = "off"
http_listen = "127.0.0.1:$http_port"
EOF
}

serve_a_client_and_keep_a_job() {
  start_server
  wait_for_port "$port"
  put_reply="$(beanstalk "$port" "use test-deb" $'put 0 0 600 14\r\nkept-over-upgr')"
  job_id="$(echo "$put_reply" | sed -n 's/^INSERTED //p')"
  [[ -n "$job_id" ]] || fail "put: $put_reply"
  ok "served a beanstalkd put as the jobyard user (job $job_id)"
  stop_server
  ok "SIGTERM stopped it with exit 0"
}

# As jobyard.socket would: systemd-socket-activate passes a socket named as the unit names
# it, which replaces beanstalk_listen from the config.
check_socket_activation() {
  local fd_name activated_port reply
  fd_name="$(sed -n 's/^FileDescriptorName=//p' "$unit_dir/jobyard.socket")"
  activated_port="$(free_port)"
  start_server systemd-socket-activate -l "127.0.0.1:$activated_port" --fdname="$fd_name"
  wait_for_port "$activated_port"
  reply="$(beanstalk "$activated_port" stats)"
  check "the socket-activated listener serves beanstalkd" grep -q '^OK ' <<<"$reply"
  check "beanstalk_listen unused under activation" bash -c \
    "! python3 -c \"import socket; socket.create_connection(('127.0.0.1', $port), 1)\" 2>/dev/null"
  stop_server
}

check_upgrade() {
  apt-get install -y "$(deb jobyard "$v2")" "$(deb jobyard-dbgsym "$v2")" </dev/null
  check "upgraded to $v2" test "$(installed_version)" == "install ok installed $v2"
  check "changed jobyard.toml kept" grep -q "changed by test_deb.sh" "$config"
  start_server
  wait_for_port "$port"
  local reply
  reply="$(beanstalk "$port" "watch test-deb" "reserve-with-timeout 0")"
  check "job $job_id still queued after the upgrade" \
    grep -q "^RESERVED $job_id 14 kept-over-upgr$" <<<"$reply"
  stop_server
}

check_remove() {
  apt-get remove -y jobyard </dev/null
  check "removed (config-files left)" test "$(installed_version)" == "deinstall ok config-files $v2"
  check "binary gone" test ! -e /usr/bin/jobyard
  check "jobyard.toml kept" grep -q "changed by test_deb.sh" "$config"
  check "data kept" test -n "$(ls -A "$data_dir")"
  check "user kept" id jobyard
}

check_purge() {
  apt-get purge -y jobyard </dev/null
  check "purged" test -z "$(installed_version | grep -v not-installed)"
  check "/etc/jobyard gone" test ! -e /etc/jobyard
  check "$data_dir gone" test ! -e "$data_dir"
  check "user gone" bash -c "! id jobyard 2>/dev/null"
  check "unit links gone" test ! -e /etc/systemd/system/multi-user.target.wants/jobyard.service
}

[[ $EUID == 0 ]] || fail "run as root (it installs the package)"
[[ -z "$(installed_version | grep -v -e not-installed -e config-files)" ]] ||
  fail "jobyard is installed already; purge it first (apt purge jobyard)"
build_both_versions
check_install
check_units
change_config
serve_a_client_and_keep_a_job
check_socket_activation
check_upgrade
check_remove
check_purge
echo "test_deb: all checks passed ($v1, upgraded to $v2)"
