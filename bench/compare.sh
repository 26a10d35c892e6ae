#!/usr/bin/env bash
# Side-by-side comparison of jobyard with Debian's beanstalkd and gearmand on this machine.
#
#   bash bench/compare.sh            # full run: 3 rounds, 5 s per workload, memory/restart (~23 min with the jobd, WMP and flows sections)
#   bash bench/compare.sh --quick    # ~2-3 min: 3 rounds of 1 s runs, 100k-job memory/restart
#
# Options: --rounds N, --duration S, --only beanstalk|gearman, --no-memory, --no-build,
#          --jobs N (memory/restart job count, default 1000000), --out DIR (default bench/results),
#          --no-jobd (skip the jobd section: bench/jobd.sh, about a minute, once, not in rounds),
#          --no-wmp (skip the 14/WMP section: bench/wmp.py against a bare ZeroMQ loop, and
#          Gearman clients served by WMP workers, ~1 min),
#          --no-flows (skip the flows section: bench/flows/run.sh, Rust and Node clients, ~7 min).
#
# Installs the peers if missing, builds jobyard and jobyard-bench (release), then for each
# durability pairing and workload starts a fresh server on a free loopback port, runs the
# load generator, stops the server, alternating peer, jobyard, peer, jobyard, ... for N
# rounds. Writes bench/results/<date>-<host>.md (+ .jsonl with every run) and latest.md:
# medians over the rounds and ratios jobyard/peer. Loopback only; every run is bounded.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

ROUNDS=3
DURATION=5
QUICK=0
ONLY=""
MEMORY=1
JOBD=1
WMP=1
FLOWS=1
BUILD=1
JOBS=1000000
OUT="$ROOT/bench/results"
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1; DURATION=1; JOBS=100000 ;;
    --rounds) ROUNDS=$2; shift ;;
    --duration) DURATION=$2; shift ;;
    --only) ONLY=$2; shift ;;
    --no-memory) MEMORY=0 ;;
    --no-jobd) JOBD=0 ;;
    --no-wmp) WMP=0 ;;
    --no-flows) FLOWS=0 ;;
    --no-build) BUILD=0 ;;
    --jobs) JOBS=$2; shift ;;
    --out) OUT=$2; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
  shift
done
[ "$ROUNDS" -ge 1 ] || die "--rounds must be at least 1"

# Sizes per durability class: "fast" (no fsync per write) and "slow" (fsync per write).
if [ "$QUICK" = 1 ]; then
  DRAIN_FAST=50000; DRAIN_SLOW=5000; GDRAIN_FAST=50000; GDRAIN_SLOW=1000
else
  DRAIN_FAST=200000; DRAIN_SLOW=20000; GDRAIN_FAST=200000; GDRAIN_SLOW=5000
fi
RATE_FAST=10000   # e2e at a fixed rate: below both servers' capacity
RATE_SLOW=1000
PUT_MAX=2000000   # count bound of the throughput runs (time bounds them first)

install_peers
[ "$BUILD" = 1 ] && build_release
[ -x "$JY" ] && [ -x "$JB" ] || die "missing $JY or $JB (build with cargo build --release -p jobyard -p jobyard-bench)"

HOST=$(hostname -s)
STAMP=$(date -u +%Y-%m-%dT%H%MZ)
mkdir -p "$OUT"
TMP="$ROOT/bench/results/tmp/$STAMP"
mkdir -p "$TMP"
JSONL="$OUT/$STAMP-$HOST.jsonl"
MD="$OUT/$STAMP-$HOST.md"
: >"$JSONL"
trap 'stop_server; rm -rf "$TMP"' EXIT

HAS_GEARMAN=0
if jobyard_has_gearman; then HAS_GEARMAN=1; fi
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
START_S=$(date +%s)

# pair id | protocol | peer kind | peer mode | jobyard kind | jobyard mode | class
PAIRS=(
  "bs-mem|beanstalk|beanstalkd|mem|jobyard-beanstalk|never|fast"
  "bs-binlog|beanstalk|beanstalkd|binlog|jobyard-beanstalk|interval=50|fast"
  "bs-fsync|beanstalk|beanstalkd|fsync|jobyard-beanstalk|always|slow"
  "gm-mem|gearman|gearmand|mem|jobyard-gearman|never|fast"
  "gm-sqlite|gearman|gearmand|sqlite|jobyard-gearman|always|slow"
)

# workload name | load generator arguments (for a class; see below)
workloads() {
  local proto=$1 class=$2 drain rate gdrain
  if [ "$class" = fast ]; then drain=$DRAIN_FAST; rate=$RATE_FAST; gdrain=$GDRAIN_FAST
  else drain=$DRAIN_SLOW; rate=$RATE_SLOW; gdrain=$GDRAIN_SLOW; fi
  if [ "$proto" = beanstalk ]; then
    echo "put|beanstalk put --conns 8 --pipeline 32 --size 100 --count $PUT_MAX --duration $DURATION"
    echo "drain|beanstalk drain --conns 8 --workers 8 --size 100 --count $drain --duration 60"
    echo "e2e|beanstalk e2e --conns 8 --workers 8 --size 100 --count $PUT_MAX --duration $DURATION"
    echo "e2e-rate|beanstalk e2e --conns 8 --workers 8 --size 100 --count $PUT_MAX --duration $DURATION --rate $rate"
    if [ "$class" = fast ]; then
      # Moderate load, where a user's CPU bill is decided (docs/performance.md).
      echo "e2e-1k|beanstalk e2e --conns 8 --workers 8 --size 100 --count $PUT_MAX --duration $DURATION --rate 1000"
      echo "e2e-5k|beanstalk e2e --conns 8 --workers 8 --size 100 --count $PUT_MAX --duration $DURATION --rate 5000"
    else
      # Durable latency at a rate an in-memory peer manages (issue 14: p99 <= 250 us).
      echo "e2e-5k|beanstalk e2e --conns 8 --workers 8 --size 100 --count $PUT_MAX --duration $DURATION --rate 5000"
    fi
  else
    echo "submit-bg|gearman submit-bg --conns 8 --pipeline 32 --size 100 --count $PUT_MAX --duration $DURATION"
    echo "drain|gearman drain --conns 8 --workers 8 --size 100 --count $gdrain --duration 60"
    echo "roundtrip|gearman roundtrip --conns 8 --workers 8 --size 100 --count $PUT_MAX --duration $DURATION"
  fi
}

declare -A SERVER_CMDS BENCH_CMDS

# run_one ROUND PAIR SIDE KIND MODE WORKLOAD ARGS
run_one() {
  local round=$1 pair=$2 side=$3 kind=$4 mode=$5 wl=$6 args=$7
  local dir="$TMP/$pair-$side-$wl-$round" port out rc load
  mkdir -p "$dir"
  port=$(free_port)
  if ! start_server "$kind" "$mode" "$dir" "$port"; then
    printf '{"pair":"%s","side":"%s","round":"%s","wl":"%s","error":"server did not start"}\n' \
      "$pair" "$side" "$round" "$wl" >>"$JSONL"
    return
  fi
  SERVER_CMDS["$pair/$side"]=$(echo "$SERVER_CMD" | sed "s#$dir#DIR#g; s#$port#PORT#g; s#$ROOT/##g")
  BENCH_CMDS["$pair/$wl"]="jobyard-bench $args --addr 127.0.0.1:PORT --server-pid PID"
  load=$(cut -d' ' -f1 /proc/loadavg)
  set +e
  # shellcheck disable=SC2086 # args are split on purpose
  out=$("$JB" $args --addr "127.0.0.1:$port" --server-pid "$SERVER_PID" --json \
    --tag "pair=$pair" --tag "side=$side" --tag "round=$round" --tag "wl=$wl" \
    --tag "server=$kind $mode" --tag "load1=$load" 2>"$dir/bench.err" </dev/null)
  rc=$?
  set -e
  stop_server
  local line
  line=$(printf '%s\n' "$out" | tail -n1)
  if [ "${line:0:1}" = "{" ]; then
    echo "$line" >>"$JSONL"
  else
    printf '{"pair":"%s","side":"%s","round":"%s","wl":"%s","error":"exit %s: %s"}\n' \
      "$pair" "$side" "$round" "$wl" "$rc" "$(head -c 200 "$dir/bench.err" | tr -d '"\\\n')" >>"$JSONL"
  fi
  local jps
  jps=$(printf '%s' "$line" | python3 -c 'import json,sys
try: d=json.loads(sys.stdin.read()); print(d.get("jobs_per_s"), "jobs/s, cpu", d.get("server_cpu_us_per_job"), "us/job, p99", d.get("lat_p99_us"), "us")
except Exception: print("FAILED")')
  log "round $round $pair $wl $side ($kind $mode): $jps"
  rm -rf "$dir"
}

for round in $(seq 1 "$ROUNDS"); do
  for spec in "${PAIRS[@]}"; do
    IFS='|' read -r pair proto pkind pmode jkind jmode class <<<"$spec"
    [ -n "$ONLY" ] && [ "$ONLY" != "$proto" ] && continue
    while IFS='|' read -r wl args; do
      run_one "$round" "$pair" peer "$pkind" "$pmode" "$wl" "$args"
      if [ "$jkind" = jobyard-gearman ] && [ "$HAS_GEARMAN" = 0 ]; then
        continue
      fi
      run_one "$round" "$pair" jobyard "$jkind" "$jmode" "$wl" "$args"
      # The floor in the same round, for the request/response workloads of one pairing
      # (its cost does not depend on durability modes).
      if [ "$pair" = bs-mem ] && [ "$wl" != put ]; then
        run_one "$round" "$pair" floor floor - "$wl" "$args"
      fi
    done < <(workloads "$proto" "$class")
  done
done

MEMJSON=""
if [ "$MEMORY" = 1 ]; then
  MEMJSON="$OUT/$STAMP-$HOST.memory.jsonl"
  bash "$ROOT/bench/memory_restart.sh" --jobs "$JOBS" --out "$MEMJSON" --no-build
fi

# jobd: no peer to alternate with (the real jobd is not installable here), so one run of
# its own workload, compared with the launch floor inside it.
JOBDMD=""
if [ "$JOBD" = 1 ] && [ -z "$ONLY" ]; then
  JOBDMD="$TMP/jobd.md"
  if ! bash "$ROOT/bench/jobd.sh" --no-build $([ "$QUICK" = 1 ] && echo --quick) \
      --jsonl "$OUT/$STAMP-$HOST.jobd.jsonl" >"$JOBDMD"; then
    echo "The jobd workload failed (see the log above)." >"$JOBDMD"
  fi
fi

# 14/WMP: jobyard as the manager against a bare ZeroMQ ROUTER<->DEALER loop, then the round
# trip Gearman client -> WMP worker -> result (jobyard-bench's Gearman clients), one run.
WMPMD=""
if [ "$WMP" = 1 ] && [ -z "$ONLY" ]; then
  WMPMD="$TMP/wmp.md"
  if ! python3 "$ROOT/bench/wmp.py" --binary "$ROOT/target/release/jobyard" --bench-binary "$JB" \
      --duration "$([ "$QUICK" = 1 ] && echo 2 || echo 5)" >"$WMPMD"; then
    echo "The WMP workload failed (see the log above)." >"$WMPMD"
  fi
fi

# Flows: no peer runs here (Guild's library needs Redis and its unpublished HEAD), so one
# run through both clients; the issue's Redis figures are the anchor.
FLOWSMD=""
if [ "$FLOWS" = 1 ] && [ -z "$ONLY" ]; then
  FLOWSMD="$TMP/flows.md"
  if bash "$ROOT/bench/flows/run.sh" --no-build --seconds "$([ "$QUICK" = 1 ] && echo 2 || echo 5)" \
      --fixed-seconds "$([ "$QUICK" = 1 ] && echo 5 || echo 30)" \
      --warmup-seconds "$([ "$QUICK" = 1 ] && echo 5 || echo 120)" --out "$OUT/flows-latest.jsonl" \
      >"$TMP/flows.jsonl"; then
    python3 "$ROOT/bench/flows/report.py" "$TMP/flows.jsonl" >"$FLOWSMD"
    cp "$TMP/flows.jsonl" "$OUT/$STAMP-$HOST.flows.jsonl"
  else
    echo "The flows workload failed (see the log above)." >"$FLOWSMD"
  fi
fi

LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
ELAPSED=$(($(date +%s) - START_S))
{
  echo "# jobyard vs beanstalkd / gearmand — $STAMP"
  echo
  echo "Produced by \`bash bench/compare.sh$([ "$QUICK" = 1 ] && echo ' --quick')\` in ${ELAPSED} s. $ROUNDS rounds," \
    "each workload run on a fresh server, alternating peer, jobyard, peer, jobyard, ...;" \
    "figures are medians over the rounds, ratios are jobyard / peer of those medians" \
    "(\"range\" is the lowest and highest per-round ratio). Client and server share the machine's" \
    "cores: quote ratios from one run, never one absolute figure."
  echo
  echo "## Machine"
  echo
  machine_facts
  echo "- load average (1, 5, 15 min) before: $LOAD_BEFORE; after: $LOAD_AFTER$(
    awk -v l="${LOAD_BEFORE%% *}" 'BEGIN { if (l > 0.5) print " — the machine was shared with other work during this run" }')"
  echo
  python3 "$ROOT/bench/report.py" --nproc "$(nproc)" --has-gearman "$HAS_GEARMAN" "$JSONL" ${MEMJSON:+--memory "$MEMJSON"}
  if [ -n "$JOBDMD" ]; then
    echo
    echo "## jobd (separate: no peer, one run, compared with the process launch floor)"
    echo
    echo "\`bash bench/jobd.sh$([ "$QUICK" = 1 ] && echo ' --quick')\`: \`jobyard jobd\` on a MariaDB it starts in a temp dir."
    echo
    cat "$JOBDMD"
  fi
  if [ -n "$WMPMD" ]; then
    echo
    echo "## 14/WMP (separate: jobyard as the manager against a bare ZeroMQ loop, and Gearman clients served by WMP workers, one run)"
    echo
    cat "$WMPMD"
  fi
  if [ -n "$FLOWSMD" ]; then
    echo
    echo "## Flows (separate: no peer, one run, Rust and Node clients)"
    echo
    cat "$FLOWSMD"
  fi
  echo
  echo "## Commands"
  echo
  echo "Servers (DIR is a fresh directory, PORT a free loopback port):"
  echo
  for k in $(printf '%s\n' "${!SERVER_CMDS[@]}" | sort); do
    echo "- $k: \`${SERVER_CMDS[$k]}\`"
  done
  echo
  echo "Load generator (same arguments for both sides of a pair):"
  echo
  for k in $(printf '%s\n' "${!BENCH_CMDS[@]}" | sort); do
    echo "- $k: \`${BENCH_CMDS[$k]}\`"
  done
  if [ "$MEMORY" = 1 ]; then
    echo
    echo "Memory and restart: \`bash bench/memory_restart.sh --jobs $JOBS\` (see docs/benchmarks.md)."
  fi
  echo
  echo "Every run's JSON line: [$(basename "$JSONL")]($(basename "$JSONL"))$([ -n "$MEMJSON" ] && echo ", [$(basename "$MEMJSON")]($(basename "$MEMJSON"))")."
} >"$MD"
cp "$MD" "$OUT/latest.md"
log "wrote $MD (and latest.md)"
cat "$MD"
