#!/usr/bin/env bash
# Instructions the server executes per job, counted by valgrind (cachegrind), for jobyard
# and beanstalkd on the same e2e workload at a moderate rate. Unlike CPU time, the count
# does not depend on what else runs on the machine, so a change to the request path can be
# judged from one run of each binary (docs/performance.md, "Instructions per job").
#
#   bash bench/instructions.sh [--jobs N] [--rate R] [--binary PATH]... [--no-peer]
#                              [--keep DIR]
#
# Each server runs twice under cachegrind, with N and 3N jobs of e2e (8 producers +
# 8 consumers, 100 B bodies, open loop at R jobs/s; defaults 2,000 and 500/s); the
# difference of the totals over the difference of the jobs is the count per job, start-up
# and shutdown cancelled out. --keep DIR keeps the cachegrind files, so
# `cg_diff DIR/NAME-small.out DIR/NAME-large.out | cg_annotate` shows where they go.
# Needs valgrind (apt-get install valgrind). Slow: about a minute per binary.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

JOBS=2000
RATE=500
BINARIES=()
PEER=1
KEEP=""
while [ $# -gt 0 ]; do
  case $1 in
    --jobs) JOBS=$2; shift ;;
    --rate) RATE=$2; shift ;;
    --binary) BINARIES+=("$2"); shift ;;
    --no-peer) PEER=0 ;;
    --keep) KEEP=$2; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
  shift
done
[ ${#BINARIES[@]} -gt 0 ] || BINARIES=("$JY")
command -v valgrind >/dev/null || die "valgrind is missing: apt-get install valgrind"
[ -x "$JB" ] || die "$JB missing: cargo build --release -p jobyard-bench"
[ "$PEER" = 0 ] || command -v beanstalkd >/dev/null || die "beanstalkd is missing"

TMP=$(mktemp -d /tmp/jobyard-instr.XXXXXX)
OUT=${KEEP:-$TMP}
mkdir -p "$OUT"
VG=""
trap '[ -n "$VG" ] && kill "$VG" 2>/dev/null; rm -rf "$TMP"' EXIT

# count NAME JOBS CMD... : runs CMD under cachegrind through JOBS jobs of e2e; prints
# "instructions jobs".
count() {
  local name=$1 jobs=$2 port
  shift 2
  port=$(free_port)
  rm -rf "$TMP/data"
  # shellcheck disable=SC2046
  valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file="$OUT/$name.out" \
    $(printf '%s\n' "$@" | sed "s/PORT/$port/") >"$TMP/$name.log" 2>&1 &
  VG=$!
  wait_port "$port" 60 || die "$name did not listen under valgrind (see $TMP/$name.log)"
  local seconds
  seconds=$(python3 -c "print($jobs / $RATE)")
  "$JB" beanstalk e2e --addr "127.0.0.1:$port" --rate "$RATE" --duration "$seconds" \
    --conns 8 --workers 8 --size 100 --json >"$TMP/$name.json"
  kill -TERM "$VG"
  wait "$VG" || true
  VG=""
  local refs done_jobs
  refs=$(sed -n 's/.*I *refs: *\([0-9,]*\).*/\1/p' "$TMP/$name.log" | tr -d ,)
  done_jobs=$(python3 -c "import json; print(json.load(open('$TMP/$name.json'))['jobs'])")
  echo "$refs $done_jobs"
}

# per_job NAME CMD... : prints NAME and the instructions per job.
per_job() {
  local name=$1
  shift
  local small large
  small=$(count "$name-small" "$JOBS" "$@")
  large=$(count "$name-large" $((JOBS * 3)) "$@")
  python3 - "$name" $small $large <<'EOF'
import sys
name, i1, j1, i2, j2 = sys.argv[1], *map(int, sys.argv[2:])
print(f"| {name} | {(i2 - i1) / (j2 - j1):,.0f} | {j2 - j1:,} |")
EOF
}

log "e2e at $RATE jobs/s, $JOBS and $((JOBS * 3)) jobs per server, under cachegrind"
echo "| server | instructions per job | jobs counted |"
echo "|---|---:|---:|"
if [ "$PEER" = 1 ]; then
  per_job beanstalkd "$(command -v beanstalkd)" -l 127.0.0.1 -p PORT
fi
n=0
for bin in "${BINARIES[@]}"; do
  n=$((n + 1))
  per_job "jobyard-$n" "$bin" serve --data-dir "$TMP/data" --beanstalk-listen 127.0.0.1:PORT \
    --gearman-listen off --http-listen off --fsync never
done
[ -z "$KEEP" ] || log "cachegrind files kept in $KEEP"
