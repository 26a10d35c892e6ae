#!/usr/bin/env bash
# What a queue policy costs (issue 29's bench): the server CPU per job of a queue with a
# retry policy (max_attempts, exponential backoff, a dead-letter queue) and a rate limit high
# enough never to throttle, against a queue without one, at a fixed rate of put + reserve +
# delete through the beanstalkd protocol, on the file log.
#
#   bash bench/policy_cost.sh [--binary PATH] [--rounds 6] [--duration 5] [--rate 5000]
#                             [--fsync never|always|interval=MS] [--out FILE.jsonl]
#                             [--instructions [--jobs 2000] [--keep DIR]]
#
# Both queues are declared in one [queues] file that every server loads, so the servers are
# identical and the only difference is the tube the jobs go through: `guarded` (the policy)
# or `plain` (none). Each run is a fresh server; runs alternate plain, guarded, plain, ...
# for N rounds. Prints the median CPU µs per job of each, the ratio guarded / plain of the
# medians (target ≤ 1.05), each round's pair ratio (the spread) and the load average before
# and after. No job ever fails here, so the retry path itself is not what is measured: the
# policy's cost on the path every job takes (the checks on put, reserve and delete) is.
#
# --instructions also counts the instructions the server executes per job on each tube
# under valgrind's cachegrind (as bench/instructions.sh does: runs of N and 3N jobs of e2e
# at 500/s, the difference over the difference of the jobs), which the machine's load does
# not move; about two minutes (--rounds 0 skips the timed rounds). --keep DIR keeps the cachegrind files, so
# `cg_diff DIR/plain-6000.out DIR/guarded-6000.out | cg_annotate /dev/stdin` shows where
# the difference goes.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

ROUNDS=6
DURATION=5
RATE=5000
FSYNC=never
OUT=""
INSTRUCTIONS=0
JOBS=2000
KEEP=""
while [ $# -gt 0 ]; do
  case $1 in
    --binary) JY=$2; shift ;;
    --rounds) ROUNDS=$2; shift ;;
    --duration) DURATION=$2; shift ;;
    --rate) RATE=$2; shift ;;
    --fsync) FSYNC=$2; shift ;;
    --out) OUT=$2; shift ;;
    --instructions) INSTRUCTIONS=1 ;;
    --jobs) JOBS=$2; shift ;;
    --keep) KEEP=$2; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
  shift
done
[ -x "$JY" ] || die "$JY is not executable (cargo build --release -p jobyard, or --binary)"
[ -x "$JB" ] || die "$JB missing: cargo build --release -p jobyard-bench"

TMP=$(mktemp -d /tmp/jobyard-policy.XXXXXX)
VG=""
trap 'stop_server; [ -n "$VG" ] && kill "$VG" 2>/dev/null; rm -rf "$TMP"' EXIT
JSONL=${OUT:-$TMP/runs.jsonl}
cat >"$TMP/queues.toml" <<'EOF'
[queues.guarded]
max_attempts = 5
backoff = "exponential"
backoff_ms = 1000
backoff_max_ms = 60000
dead_letter = "guarded-dead"
rate_limit = "100000/s"
EOF
export JY_EXTRA="--queues $TMP/queues.toml"

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq 1 "$ROUNDS"); do
  for tube in plain guarded; do
    dir="$TMP/$tube-$round"
    mkdir -p "$dir"
    port=$(free_port)
    start_server jobyard-beanstalk "$FSYNC" "$dir" "$port" || die "server did not start"
    line=$("$JB" beanstalk e2e --conns 8 --workers 8 --size 100 --count 100000000 \
      --duration "$DURATION" --rate "$RATE" --queue "$tube" --addr "127.0.0.1:$port" \
      --server-pid "$SERVER_PID" --json --tag "tube=$tube" --tag "round=$round" \
      --tag "fsync=$FSYNC" 2>"$dir/bench.err" </dev/null | tail -n1)
    stop_server
    echo "$line" >>"$JSONL"
    log "round $round $tube: $(printf '%s' "$line" | python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); print(round(d["jobs_per_s"]), "jobs/s,", d["server_cpu_us_per_job"], "us/job, errors", d["errors"], ", p99", d["lat_p99_us"], "us")')"
    rm -rf "$dir"
  done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# --rounds 0: the instruction count alone.
[ "$ROUNDS" -gt 0 ] && python3 - "$JSONL" "$LOAD_BEFORE" "$LOAD_AFTER" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {"plain": {}, "guarded": {}}
for r in rows:
    by[r["tube"]][r["round"]] = r
for r in rows:
    if r["errors"] or r.get("timed_out"):
        print(f"warning: round {r['round']} {r['tube']}: errors {r['errors']}, timed out {r.get('timed_out')}")
med = {t: statistics.median(x["server_cpu_us_per_job"] for x in v.values()) for t, v in by.items()}
pairs = [by["guarded"][k]["server_cpu_us_per_job"] / by["plain"][k]["server_cpu_us_per_job"]
         for k in sorted(by["plain"], key=int) if k in by["guarded"]]
ratio = med["guarded"] / med["plain"]
print(f"server CPU µs per job, median of {len(pairs)} rounds: plain {med['plain']:.2f}, "
      f"guarded {med['guarded']:.2f}; guarded / plain {ratio:.3f} (target ≤ 1.05: "
      f"{'met' if ratio <= 1.05 else 'NOT met'})")
print("pair ratios: " + ", ".join(f"{p:.3f}" for p in pairs) +
      f" (min {min(pairs):.3f}, max {max(pairs):.3f})")
print(f"load average before {sys.argv[2]}, after {sys.argv[3]}")
print(json.dumps({"summary": "policy_cost", "plain_us_per_job": med["plain"],
                  "guarded_us_per_job": med["guarded"], "ratio": ratio, "pair_ratios": pairs,
                  "load_before": sys.argv[2], "load_after": sys.argv[3]}))
EOF

[ "$INSTRUCTIONS" = 1 ] || exit 0
command -v valgrind >/dev/null || die "valgrind is missing: apt-get install valgrind"
# count TUBE JOBS: instructions of a whole server run through JOBS jobs of e2e on TUBE.
count() {
  local tube=$1 jobs=$2 port
  port=$(free_port)
  rm -rf "$TMP/data"
  # shellcheck disable=SC2086 # JY_EXTRA is split on purpose
  valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file="$TMP/$tube-$jobs.out" \
    "$JY" serve --data-dir "$TMP/data" --beanstalk-listen "127.0.0.1:$port" --gearman-listen off \
    --http-listen off --fsync "$FSYNC" $JY_EXTRA >"$TMP/$tube-$jobs.log" 2>&1 &
  VG=$!
  wait_port "$port" 60 || die "jobyard did not listen under valgrind (see $TMP/$tube-$jobs.log)"
  "$JB" beanstalk e2e --addr "127.0.0.1:$port" --rate 500 --duration "$(python3 -c "print($jobs / 500)")" \
    --conns 8 --workers 8 --size 100 --queue "$tube" --json >"$TMP/$tube-$jobs.json"
  kill -TERM "$VG"
  wait "$VG" || true
  VG=""
  local refs done_jobs
  refs=$(sed -n 's/.*I *refs: *\([0-9,]*\).*/\1/p' "$TMP/$tube-$jobs.log" | tr -d ,)
  if [ -n "$KEEP" ]; then mkdir -p "$KEEP" && cp "$TMP/$tube-$jobs.out" "$KEEP/"; fi
  done_jobs=$(python3 -c "import json; print(json.load(open('$TMP/$tube-$jobs.json'))['jobs'])")
  echo "$refs $done_jobs"
}
log "instructions per job under cachegrind: e2e at 500/s, $JOBS and $((JOBS * 3)) jobs per tube"
declare -A PER
for tube in plain guarded; do
  small=$(count "$tube" "$JOBS")
  large=$(count "$tube" $((JOBS * 3)))
  PER[$tube]=$(python3 -c "import sys; i1, j1, i2, j2 = map(int, sys.argv[1:]); print((i2 - i1) / (j2 - j1))" $small $large)
  log "$tube: $(printf '%.0f' "${PER[$tube]}") instructions per job"
done
python3 -c "import json, sys; p, g = map(float, sys.argv[1:]); print(f'instructions per job: plain {p:,.0f}, guarded {g:,.0f}; guarded / plain {g / p:.3f}'); print(json.dumps({'summary': 'policy_cost_instructions', 'plain_per_job': p, 'guarded_per_job': g, 'ratio': g / p}))" "${PER[plain]}" "${PER[guarded]}"
