# Shared helpers for bench/*.sh: peers, builds, ports, starting and stopping servers.
# Sourced, not run. Every server listens on 127.0.0.1 only.

ROOT=${ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
JY=${JY:-$ROOT/target/release/jobyard}
JB=${JB:-$ROOT/target/release/jobyard-bench}

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Installs beanstalkd, gearmand and sqlite3 from Debian if missing (idempotent).
install_peers() {
  local need=()
  for pkg in beanstalkd gearman-job-server sqlite3 python3; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
  done
  if [ ${#need[@]} -gt 0 ]; then
    log "installing Debian packages: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
  # Packaged services must not hold ports or CPU during a run.
  if command -v systemctl >/dev/null 2>&1; then
    systemctl stop beanstalkd gearman-job-server >/dev/null 2>&1 || true
  fi
}

# Builds the server and the load generator (release).
build_release() {
  log "building jobyard and jobyard-bench (release)"
  (cd "$ROOT" && cargo build --release --quiet -p jobyard -p jobyard-bench)
}

# Does this jobyard speak Gearman (`serve --gearman-listen`)?
jobyard_has_gearman() {
  "$JY" serve --help 2>/dev/null | grep -q -- '--gearman-listen'
}

# A free TCP port on 127.0.0.1 (bound and released by the kernel's choice).
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# Waits until 127.0.0.1:$1 accepts connections (at most $2 seconds, default 30; gives up
# at once if process $3, when given, has exited).
wait_port() {
  local port=$1 limit=${2:-30} pid=${3:-} i=0
  while ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
    i=$((i + 1))
    [ "$i" -gt $((limit * 100)) ] && return 1
    [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null && return 1
    sleep 0.01
  done
}

# `--http-listen off` if this jobyard has the HTTP API (benchmarks measure one protocol,
# and a fixed default port must not collide with anything).
jobyard_http_off() {
  "$JY" serve --help 2>/dev/null | grep -q -- '--http-listen' && echo "--http-listen off"
  return 0
}

# server_cmd KIND MODE DIR PORT: prints the command line (one word a line) of a server.
#   KIND: beanstalkd | gearmand | jobyard-beanstalk | jobyard-gearman | floor
#   MODE: beanstalkd: mem | binlog | fsync; gearmand: mem | sqlite;
#         jobyard: never | interval=MS | always
server_cmd() {
  local kind=$1 mode=$2 dir=$3 port=$4
  case $kind in
    beanstalkd)
      case $mode in
        mem) echo beanstalkd -l 127.0.0.1 -p "$port" ;;
        binlog) echo beanstalkd -l 127.0.0.1 -p "$port" -b "$dir" -F ;;
        fsync) echo beanstalkd -l 127.0.0.1 -p "$port" -b "$dir" -f0 ;;
        *) die "beanstalkd mode $mode" ;;
      esac ;;
    gearmand)
      case $mode in
        mem) echo gearmand -L 127.0.0.1 -p "$port" --log-file=none -P "$dir/gearmand.pid" ;;
        sqlite) echo gearmand -L 127.0.0.1 -p "$port" --log-file=none -P "$dir/gearmand.pid" \
          -q libsqlite3 --libsqlite3-db="$dir/queue.sqlite" ;;
        *) die "gearmand mode $mode" ;;
      esac ;;
    jobyard-beanstalk)
      local extra=""
      jobyard_has_gearman && extra="--gearman-listen off"
      # JY_EXTRA: more server flags for one measurement (e.g. --bodies-in-log=false).
      echo "$JY" serve --data-dir "$dir/data" --beanstalk-listen "127.0.0.1:$port" --fsync "$mode" $extra \
        $(jobyard_http_off) ${JY_EXTRA:-} ;;
    jobyard-gearman)
      echo "$JY" serve --data-dir "$dir/data" --beanstalk-listen off --gearman-listen "127.0.0.1:$port" --fsync "$mode" \
        $(jobyard_http_off) ;;
    floor)
      # The kernel floor: one-thread epoll responder, no job state beyond a FIFO (MODE unused).
      echo "$JB" floor --listen "127.0.0.1:$port" ;;
    *) die "server kind $kind" ;;
  esac
}

# start_server KIND MODE DIR PORT: starts it in the background; sets SERVER_PID and
# SERVER_CMD. DIR must exist (it holds the log/db and the server's output). With NOWAIT=1
# it returns at once instead of waiting for the port.
start_server() {
  local kind=$1 mode=$2 dir=$3 port=$4
  SERVER_CMD=$(server_cmd "$kind" "$mode" "$dir" "$port")
  # shellcheck disable=SC2086 # the command line is split on purpose
  $SERVER_CMD >"$dir/server.log" 2>&1 </dev/null &
  SERVER_PID=$!
  [ "${NOWAIT:-0}" = 1 ] && return 0
  if ! wait_port "$port" 60 "$SERVER_PID"; then
    log "server did not start: $SERVER_CMD"
    tail -5 "$dir/server.log" >&2 || true
    stop_server
    return 1
  fi
}

# Stops the server started last (SIGTERM, then SIGKILL after 15 s).
stop_server() {
  [ -n "${SERVER_PID:-}" ] || return 0
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  local i=0
  while kill -0 "$SERVER_PID" 2>/dev/null; do
    i=$((i + 1))
    if [ "$i" -gt 1500 ]; then
      log "server $SERVER_PID ignored SIGTERM for 15 s; killing it"
      kill -KILL "$SERVER_PID" 2>/dev/null || true
    fi
    sleep 0.01
  done
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}

# One line of facts about the machine, for the results.
machine_facts() {
  echo "- host: $(hostname -s), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'))," \
    "$(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) RAM"
  echo "- kernel: $(uname -sr); OS: $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "- peers: $(beanstalkd -v 2>&1 | head -1); $(gearmand --version 2>&1 | grep -m1 gearmand | sed 's/ - .*//')"
  echo "- jobyard: $(cd "$ROOT" && git rev-parse --short HEAD)$(cd "$ROOT" && git diff --quiet HEAD -- crates Cargo.toml || echo ' (with uncommitted changes)'), $("$JY" --version 2>/dev/null)"
  echo "- $(rustc --version)"
}
