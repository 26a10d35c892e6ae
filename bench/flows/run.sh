#!/usr/bin/env bash
# The flow benchmark (issue 12): a 3-stage linear flow and a 3-stage flow with a fan-out of
# 3 children, 4 workers per stage, trivial handlers, through the Node client and the Rust
# client, against a release `jobyard serve` (fsync always) on a free loopback port.
#
#   bash bench/flows/run.sh [--seconds S] [--rate R] [--fixed-seconds F] [--warmup-seconds W]
#        [--out FILE] [--no-build]
#
# Saturated runs last S seconds (default 5); the fixed-rate runs F seconds (default 30, so
# that the p99 is of 300 flows at 10/s), after W seconds at the same rate (default 120)
# that the Node client reports apart as its cold start. The Node part ends with the
# ceiling of one Node process's HTTP requests per second against the same server (the
# client's transport, node:http, fetch and undici's Pool), then
# runs the linear fixed-rate measurement again with V8's helper threads at idle priority.
# Prints one JSON line per measurement and writes them to FILE (default
# bench/results/flows-latest.jsonl); `python3 bench/flows/report.py FILE` makes the
# table of docs/benchmarks.md from it.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SECONDS_PER_RUN=5
RATE=10
FIXED_SECONDS=30
WARMUP_SECONDS=120
BUILD=1
OUT="$ROOT/bench/results/flows-latest.jsonl"
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) SECONDS_PER_RUN=$2; shift ;;
    --rate) RATE=$2; shift ;;
    --fixed-seconds) FIXED_SECONDS=$2; shift ;;
    --warmup-seconds) WARMUP_SECONDS=$2; shift ;;
    --out) OUT=$2; shift ;;
    --no-build) BUILD=0 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
if [ "$BUILD" = 1 ]; then
  (cd "$ROOT" && cargo build --release --quiet -p jobyard -p jobyard-bench)
fi
# undici, measured beside the client's own transport in the ceiling (package-lock.json).
if [ ! -d "$ROOT/bench/flows/node_modules/undici" ]; then
  (cd "$ROOT/bench/flows" && npm ci --no-audit --no-fund --silent) \
    || echo "run.sh: npm ci failed; the ceiling goes on without undici" >&2
fi
BIN="$ROOT/target/release/jobyard"
DIR=$(mktemp -d)
trap 'kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; rm -rf "$DIR"' EXIT
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
env -u JOBYARD_CONFIG "$BIN" serve --data-dir "$DIR/data" --fsync always --beanstalk-listen off \
  --gearman-listen off --http-listen "127.0.0.1:$PORT" >"$DIR/server.log" 2>&1 &
PID=$!
for _ in $(seq 1 300); do
  curl -sf "http://127.0.0.1:$PORT/v1/health" >/dev/null && break
  sleep 0.1
done
: >"$OUT"
node "$ROOT/bench/flows/bench.mjs" --url "http://127.0.0.1:$PORT" --pid "$PID" \
  --seconds "$SECONDS_PER_RUN" --rate "$RATE" --fixed-seconds "$FIXED_SECONDS" \
  --warmup-seconds "$WARMUP_SECONDS" | tee -a "$OUT"
# The same linear fixed-rate run in a process whose V8 helper threads run at idle priority:
# how much of the Node client's tail is the kernel running them ahead of its main thread.
node "$ROOT/bench/flows/bench.mjs" --url "http://127.0.0.1:$PORT" --pid "$PID" --only linear \
  --modes fixed --ceiling off --rate "$RATE" --fixed-seconds "$FIXED_SECONDS" \
  --warmup-seconds "$WARMUP_SECONDS" --helper-threads idle | tee -a "$OUT"
if [ -x "$ROOT/target/release/jobyard-bench" ] && "$ROOT/target/release/jobyard-bench" flows --help >/dev/null 2>&1; then
  "$ROOT/target/release/jobyard-bench" flows --url "http://127.0.0.1:$PORT" --pid "$PID" \
    --seconds "$SECONDS_PER_RUN" --rate "$RATE" --fixed-seconds "$FIXED_SECONDS" | tee -a "$OUT"
fi
