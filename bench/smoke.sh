#!/usr/bin/env bash
# Smoke run of the load generator against a jobyard it starts itself, so the harness cannot
# rot: a few thousand jobs per workload, a few seconds in all, loopback only. Checks that each
# run's JSON line parses and its counts are right (no timing is checked). Exits non-zero on
# failure.
#
#   bash bench/smoke.sh                 # builds debug binaries first
#   bash bench/smoke.sh --bin-dir DIR   # uses DIR/jobyard and DIR/jobyard-bench as they are
#
# Also run by `cargo test -p jobyard-bench` (crates/bench/tests/smoke.rs).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

BIN_DIR=""
while [ $# -gt 0 ]; do
  case $1 in
    --bin-dir) BIN_DIR=$2; shift ;;
    *) echo "smoke: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$BIN_DIR" ]; then
  (cd "$ROOT" && cargo build --quiet -p jobyard -p jobyard-bench)
  BIN_DIR="$ROOT/target/debug"
fi
JY="$BIN_DIR/jobyard"
JB="$BIN_DIR/jobyard-bench"
for b in "$JY" "$JB"; do
  [ -x "$b" ] || { echo "smoke: $b is missing (cargo build -p jobyard -p jobyard-bench)" >&2; exit 1; }
done
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/jobyard-smoke.XXXXXX")
trap 'stop_server; rm -rf "$TMP"' EXIT
failures=0

# check NAME JSON PYTHON-CONDITION (over d, the parsed line)
check() {
  local name=$1 json=$2 cond=$3
  if printf '%s' "$json" | python3 -c "
import json, sys
d = json.loads(sys.stdin.read().strip().splitlines()[-1])
ok = $cond
print(('ok  ' if ok else 'FAIL'), '$name', {k: d.get(k) for k in ('jobs', 'errors', 'conn_errors', 'timed_out', 'jobs_per_s', 'lat_p99_us', 'server_cpu_us_per_job', 'puts_acked', 'consumed_total', 'prefilled', 'jobs_ready', 'ready_s')})
sys.exit(0 if ok else 1)
"; then :; else
    failures=$((failures + 1))
    echo "     line: $json" >&2
  fi
}

clean='d["errors"] == 0 and d["conn_errors"] == 0 and not d["timed_out"] and d["server_cpu_s"] is not None and d["server_rss_kb"] > 0'

port=$(free_port)
mkdir -p "$TMP/bs"
start_server jobyard-beanstalk never "$TMP/bs" "$port"
A=(--addr "127.0.0.1:$port" --server-pid "$SERVER_PID" --threads 2 --grace 20)
out=$("$JB" beanstalk put "${A[@]}" --conns 4 --pipeline 16 --count 3000 --duration 30 || true)
check "beanstalk put" "$out" "$clean and d['jobs'] == 3000 and d['lat_count'] == 3000"
out=$("$JB" beanstalk drain "${A[@]}" --queue drain --conns 2 --workers 4 --count 2000 --duration 30 || true)
check "beanstalk drain" "$out" "$clean and d['prefilled'] == 2000 and d['jobs'] == 2000"
out=$("$JB" beanstalk e2e "${A[@]}" --queue e2e --conns 2 --workers 2 --count 2000 --duration 2 || true)
check "beanstalk e2e" "$out" "$clean and d['puts_acked'] > 0 and d['consumed_total'] == d['puts_acked'] and d['lat_count'] == d['consumed_total']"
out=$("$JB" beanstalk e2e "${A[@]}" --queue rate --conns 2 --workers 2 --count 400 --duration 2 --rate 500 || true)
check "beanstalk e2e --rate" "$out" "$clean and 0 < d['puts_acked'] <= 400 and d['consumed_total'] == d['puts_acked']"
# The put run left 3000 jobs in tube bench: a restart must find them all.
stop_server
t0=$(date +%s%N)
NOWAIT=1 start_server jobyard-beanstalk never "$TMP/bs" "$port"
out=$("$JB" wait-ready --addr "127.0.0.1:$port" --count 3000 --since-ns "$t0" --timeout 60 || true)
check "wait-ready after restart" "$out" "d['jobs_ready'] >= 3000 and d['ready_s'] > 0"
stop_server

if jobyard_has_gearman; then
  port=$(free_port)
  mkdir -p "$TMP/gm"
  start_server jobyard-gearman never "$TMP/gm" "$port"
  A=(--addr "127.0.0.1:$port" --server-pid "$SERVER_PID" --threads 2 --grace 20)
  out=$("$JB" gearman submit-bg "${A[@]}" --conns 4 --pipeline 16 --count 3000 --duration 30 || true)
  check "gearman submit-bg" "$out" "$clean and d['jobs'] == 3000"
  out=$("$JB" gearman drain "${A[@]}" --queue drain --conns 2 --workers 4 --count 2000 --duration 30 || true)
  check "gearman drain" "$out" "$clean and d['prefilled'] == 2000 and d['jobs'] == 2000"
  out=$("$JB" gearman roundtrip "${A[@]}" --queue rt --conns 4 --workers 4 --count 1000 --duration 30 || true)
  check "gearman roundtrip" "$out" "$clean and d['jobs'] == 1000"
  stop_server
else
  echo "skip gearman: this jobyard has no --gearman-listen yet"
fi

if [ "$failures" -gt 0 ]; then
  echo "smoke: $failures check(s) failed" >&2
  exit 1
fi
echo "smoke: all checks passed"
