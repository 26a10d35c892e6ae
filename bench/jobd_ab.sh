#!/usr/bin/env bash
# Two jobyard binaries on the jobd workload (bench/jobd_bench.py, the three `jobd` shapes
# only), alternating A, B, A, B, ... for N rounds in one run, so both see the same machine
# within a minute of each other: on a shared machine absolute figures drift, the ratios of
# medians measured this way do not (as much).
#
#   bash bench/jobd_ab.sh --a OLD/jobyard --b target/release/jobyard [--rounds 3] [--quick]
#
# Prints, per shape, the median of each side (and each round's figure) (jobs/s ÷ launch floor, worker and MariaDB CPU
# ms/job, worker context switches per job, statements / commits / fsyncs per job, latency p50 / p99) and B / A, plus the load
# average before and after. Keep a copy of the "before" binary before building the change.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

A=""
B="$ROOT/target/release/jobyard"
ROUNDS=3
ARGS=(--jobs 2000 --samples 200)
while [ $# -gt 0 ]; do
  case $1 in
    --a) A=$2; shift ;;
    --b) B=$2; shift ;;
    --rounds) ROUNDS=$2; shift ;;
    --quick) ARGS=(--jobs 1000 --samples 100) ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
  shift
done
[ -x "$A" ] || die "--a must name the old binary"
[ -x "$B" ] || die "missing $B"
OUT=$(mktemp -d /tmp/jobd-ab.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$ROUNDS"); do
  for side in A B; do
    bin=$A
    [ "$side" = B ] && bin=$B
    log "round $r/$ROUNDS: $side ($bin)"
    # Once more if it fails: on a shared machine the MariaDB it starts can lose its free
    # port to another process before binding it.
    python3 "$ROOT/bench/jobd_bench.py" --bin "$bin" --shapes-only "${ARGS[@]}" \
      --jsonl "$OUT/$side.jsonl" >/dev/null \
      || python3 "$ROOT/bench/jobd_bench.py" --bin "$bin" --shapes-only "${ARGS[@]}" \
        --jsonl "$OUT/$side.jsonl" >/dev/null
  done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$OUT" "$ROUNDS" "$LOAD_BEFORE" "$LOAD_AFTER" <<'PY'
import json, statistics, sys
out, rounds, before, after = sys.argv[1:]
def load(side):
    rows = [json.loads(l) for l in open(f"{out}/{side}.jsonl")]
    return [r for r in rows if "jobs_per_s" in r]
a, b = load("A"), load("B")
fields = [
    ("vs floor", lambda r: r["jobs_per_s"] / r["floor_per_s"], 2),
    ("jobs/s", lambda r: r["jobs_per_s"], 0),
    ("worker CPU ms/job", lambda r: r["worker_cpu_ms_per_job"], 3),
    ("MariaDB CPU ms/job", lambda r: r["mariadb_cpu_ms_per_job"], 3),
    ("worker switches/job", lambda r: r.get("worker_switches_per_job", 0), 2),
    ("statements/job", lambda r: r["statements_per_job"], 2),
    ("commits/job", lambda r: r["commits_per_job"], 2),
    ("fsyncs/job", lambda r: r["fsyncs_per_job"], 2),
    ("p50 ms", lambda r: r["lat_direct"]["p50_ms"], 2),
    ("p99 ms", lambda r: r["lat_direct"]["p99_ms"], 2),
]
print(f"A/B, {rounds} alternating rounds; load average before {before}, after {after}\n")
print("| shape | figure | A median (rounds) | B median (rounds) | B / A |")
print("|---|---|---:|---:|---:|")
for shape in ("1x1", "1x8", "4x4"):
    ra = [r for r in a if r["shape"] == shape]
    rb = [r for r in b if r["shape"] == shape]
    for name, f, d in fields:
        va, vb = [f(r) for r in ra], [f(r) for r in rb]
        ma, mb = statistics.median(va), statistics.median(vb)
        ratio = f"{mb / ma:.2f}" if ma else "-"
        each = lambda v: ", ".join(f"{x:.{d}f}" for x in v)
        print(f"| {shape} | {name} | {ma:.{d}f} ({each(va)}) | {mb:.{d}f} ({each(vb)}) | {ratio} |")
PY
