#!/usr/bin/env bash
# Memory and restart: RSS after loading N jobs of 100 bytes; time from process start to all
# N jobs ready after a restart (three restarts; each timed); bytes on disk after the three
# restarts. For jobyard and beanstalkd -b (RSS also for beanstalkd and gearmand in memory,
# and jobyard's Gearman side when it has one).
#
#   bash bench/memory_restart.sh [--jobs N] [--out FILE.jsonl] [--no-build]
#
# Prints one JSON line per server (also appended to --out).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

JOBS=1000000
OUT=""
BUILD=1
SIZE=100
while [ $# -gt 0 ]; do
  case $1 in
    --jobs) JOBS=$2; shift ;;
    --out) OUT=$2; shift ;;
    --no-build) BUILD=0 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) die "unknown option $1" ;;
  esac
  shift
done

install_peers
[ "$BUILD" = 1 ] && build_release
TMP=$(mktemp -d "${TMPDIR:-/tmp}/jobyard-memory.XXXXXX")
trap 'stop_server; rm -rf "$TMP"' EXIT

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
disk_bytes() { du -sb "$1" 2>/dev/null | cut -f1; }
json_field() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read()).get(sys.argv[1]))' "$1"; }

emit() {
  echo "$1"
  [ -n "$OUT" ] && echo "$1" >>"$OUT"
  return 0
}

# measure LABEL KIND MODE PROTO RESTARTS(0|1)
measure() {
  local label=$1 kind=$2 mode=$3 proto=$4 restarts=$5
  local dir="$TMP/${label//[^A-Za-z0-9]/_}" port fill rss0 rss1 fill_jps
  rm -rf "$dir"; mkdir -p "$dir"
  port=$(free_port)
  start_server "$kind" "$mode" "$dir" "$port" || { emit "{\"server\":\"$label\",\"error\":\"did not start\"}"; return; }
  local cmd=$SERVER_CMD
  sleep 0.2
  rss0=$(rss_kb "$SERVER_PID")
  log "$label: loading $JOBS jobs of $SIZE bytes"
  if [ "$proto" = beanstalk ]; then
    fill=$("$JB" beanstalk put --addr "127.0.0.1:$port" --conns 8 --pipeline 32 --size "$SIZE" \
      --count "$JOBS" --duration 600 --server-pid "$SERVER_PID" --json </dev/null) || true
  else
    fill=$("$JB" gearman submit-bg --addr "127.0.0.1:$port" --conns 8 --pipeline 32 --size "$SIZE" \
      --count "$JOBS" --duration 600 --server-pid "$SERVER_PID" --json </dev/null) || true
  fi
  local loaded
  loaded=$(printf '%s' "$fill" | json_field jobs 2>/dev/null || echo 0)
  fill_jps=$(printf '%s' "$fill" | json_field jobs_per_s 2>/dev/null || echo 0)
  sleep 1
  rss1=$(rss_kb "$SERVER_PID")
  local disk_fill=null ready=() connect=() rss_restart=null disk_after=null
  if [ "$restarts" = 1 ]; then
    disk_fill=$(disk_bytes "$dir")
    for i in 1 2 3; do
      stop_server
      local t0 out
      t0=$(date +%s%N)
      NOWAIT=1 start_server "$kind" "$mode" "$dir" "$port"
      out=$("$JB" wait-ready --proto "$proto" --addr "127.0.0.1:$port" --count "$loaded" \
        --since-ns "$t0" --timeout 300 </dev/null) || true
      ready+=("$(printf '%s' "$out" | json_field ready_s 2>/dev/null || echo null)")
      connect+=("$(printf '%s' "$out" | json_field connect_s 2>/dev/null || echo null)")
      log "$label: restart $i: $loaded jobs ready after ${ready[-1]} s (listening after ${connect[-1]} s)"
    done
    sleep 0.5
    rss_restart=$(rss_kb "$SERVER_PID")
    disk_after=$(disk_bytes "$dir")
  fi
  stop_server
  local joined_ready joined_connect
  joined_ready=$(IFS=,; echo "${ready[*]:-}")
  joined_connect=$(IFS=,; echo "${connect[*]:-}")
  cmd=$(echo "$cmd" | sed "s#$dir#DIR#g; s#$port#PORT#g; s#$ROOT/##g")
  emit "{\"server\":\"$label\",\"cmd\":\"$cmd\",\"jobs\":$loaded,\"size\":$SIZE,\"fill_jobs_per_s\":$fill_jps,\"rss_before_kb\":$rss0,\"rss_after_kb\":$rss1,\"disk_after_fill\":$disk_fill,\"ready_s\":[${joined_ready}],\"connect_s\":[${joined_connect}],\"rss_after_restarts_kb\":$rss_restart,\"disk_after_3_restarts\":$disk_after}"
  rm -rf "$dir"
}

measure "jobyard --fsync interval=50" jobyard-beanstalk interval=50 beanstalk 1
# The same with every body kept in memory (bodies only in the log is the default:
# docs/performance.md).
JY_EXTRA=--bodies-in-log=false measure "jobyard --fsync interval=50 --bodies-in-log=false" jobyard-beanstalk interval=50 beanstalk 1
measure "beanstalkd -b -F" beanstalkd binlog beanstalk 1
measure "beanstalkd (memory)" beanstalkd mem beanstalk 0
measure "gearmand (memory)" gearmand mem gearman 0
if jobyard_has_gearman; then
  measure "jobyard gearman --fsync interval=50" jobyard-gearman interval=50 gearman 1
else
  log "jobyard has no --gearman-listen yet: no jobyard Gearman memory row"
fi
