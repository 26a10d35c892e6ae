#!/usr/bin/env bash
# The jobd workload: `jobyard jobd` on a real MariaDB (started in a temp dir), launcher
# `true`, shapes 1x1, 1x8 and 4x4 (targets x concurrency), side by side with the launch
# floor `xargs -P N -n1 true` over the same number of ids. See bench/jobd_bench.py.
#
#   bash bench/jobd.sh             # 2000 rows per run, 1000 latency samples (~1 min)
#   bash bench/jobd.sh --quick     # 1000 rows, 100 samples
#
# Options: --no-build, --jsonl FILE (one JSON line per measurement), --db-flush 0|1|2
# (MariaDB innodb_flush_log_at_trx_commit; default 1, MariaDB's own default), --breakdown
# (the 1x8 worker logs each job's timing at debug level; prints where the latency goes).
# Prints a markdown section on stdout.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

BUILD=1
# 1000 latency samples: the p99 is then the 10th-slowest, not the 2nd-slowest of 200,
# which moved by ±0.5 ms from run to run (docs/benchmarks.md, "jobd").
ARGS=(--jobs 2000 --samples 1000 --master-samples 15)
EXTRA=()
while [ $# -gt 0 ]; do
  case $1 in
    --quick) ARGS=(--jobs 1000 --samples 100 --master-samples 8) ;;
    --no-build) BUILD=0 ;;
    --jsonl) EXTRA+=(--jsonl "$2"); shift ;;
    --db-flush) EXTRA+=(--db-flush "$2"); shift ;;
    --breakdown) EXTRA+=(--breakdown) ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
  shift
done

command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] \
  || die "mariadbd is missing (scripts/setup.sh installs mariadb-server)"
python3 -c 'import pymysql' 2>/dev/null \
  || die "the Python package pymysql is missing (scripts/setup.sh installs it)"
if [ "$BUILD" = 1 ]; then
  log "building jobyard (release)"
  (cd "$ROOT" && cargo build --release --quiet -p jobyard)
fi
[ -x "$JY" ] || die "missing $JY (cargo build --release -p jobyard)"
log "jobd workload: MariaDB in a temp dir, shapes 1x1, 1x8, 4x4 (+ 1x8 inside serve, + via the master)"
python3 "$ROOT/bench/jobd_bench.py" --bin "$JY" "${ARGS[@]}" "${EXTRA[@]}"
