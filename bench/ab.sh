#!/usr/bin/env bash
# Two jobyard binaries side by side on the hot-path workloads, to tell whether a change
# costs anything: beanstalkd put, drain and e2e (saturated and at fixed rates of 1k, 5k and
# 10k jobs/s, where moderate-load CPU is decided), Gearman drain, each on a fresh server
# (--fsync never), alternating A, B, A, B, ... for N rounds in one run, so both binaries
# see the same machine within seconds of each other.
#
#   bash bench/ab.sh --a OLD/jobyard --b target/release/jobyard [--rounds 5] [--duration 2]
#                    [--drain JOBS] [--only WL[,WL...]] [--fsync never|always|interval=MS]
#
# Workloads: bs-put, bs-drain, bs-e2e, bs-e2e-1k, bs-e2e-5k, bs-e2e-10k, g-drain.
#
# Keep a copy of the "before" binary (cp target/release/jobyard /tmp/jobyard-before) before
# building the change. Prints, per workload, the median jobs/s and server CPU µs per job of
# each side and the ratio B / A of the medians, plus the load average before and after.
# Quote CPU per job (it does not depend on who won the scheduler); loopback only.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

A=""
B="$ROOT/target/release/jobyard"
ROUNDS=5
DURATION=2
DRAIN=100000
ONLY=""
FSYNC=never
while [ $# -gt 0 ]; do
  case $1 in
    --a) A=$2; shift ;;
    --b) B=$2; shift ;;
    --rounds) ROUNDS=$2; shift ;;
    --duration) DURATION=$2; shift ;;
    --drain) DRAIN=$2; shift ;;
    --only) ONLY=$2; shift ;;
    --fsync) FSYNC=$2; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
  shift
done
[ -x "$A" ] || die "--a must name the 'before' jobyard binary"
[ -x "$B" ] || die "--b $B is not executable"
[ -x "$JB" ] || die "$JB missing: cargo build --release -p jobyard-bench"

TMP=$(mktemp -d /tmp/jobyard-ab.XXXXXX)
trap 'stop_server; rm -rf "$TMP"' EXIT
JSONL="$TMP/runs.jsonl"

WORKLOADS=(
  "bs-put|jobyard-beanstalk|beanstalk put --conns 8 --pipeline 32 --size 100 --count 2000000 --duration $DURATION"
  "bs-drain|jobyard-beanstalk|beanstalk drain --conns 8 --workers 8 --size 100 --count $DRAIN --duration 60"
  "bs-e2e|jobyard-beanstalk|beanstalk e2e --conns 8 --workers 8 --size 100 --count 2000000 --duration $DURATION"
  "bs-e2e-1k|jobyard-beanstalk|beanstalk e2e --conns 8 --workers 8 --size 100 --count 2000000 --duration $DURATION --rate 1000"
  "bs-e2e-5k|jobyard-beanstalk|beanstalk e2e --conns 8 --workers 8 --size 100 --count 2000000 --duration $DURATION --rate 5000"
  "bs-e2e-10k|jobyard-beanstalk|beanstalk e2e --conns 8 --workers 8 --size 100 --count 2000000 --duration $DURATION --rate 10000"
  "g-drain|jobyard-gearman|gearman drain --conns 8 --workers 8 --size 100 --count $DRAIN --duration 60"
)

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq 1 "$ROUNDS"); do
  for spec in "${WORKLOADS[@]}"; do
    IFS='|' read -r wl kind args <<<"$spec"
    [ -n "$ONLY" ] && [[ ",$ONLY," != *",$wl,"* ]] && continue
    for side in a b; do
      if [ "$side" = a ]; then JY=$A; else JY=$B; fi
      dir="$TMP/$wl-$side-$round"
      mkdir -p "$dir"
      port=$(free_port)
      start_server "$kind" "$FSYNC" "$dir" "$port" || die "server $side did not start"
      # shellcheck disable=SC2086 # args are split on purpose
      line=$("$JB" $args --addr "127.0.0.1:$port" --server-pid "$SERVER_PID" --json \
        --tag "wl=$wl" --tag "side=$side" --tag "round=$round" 2>"$dir/bench.err" </dev/null | tail -n1)
      stop_server
      echo "$line" >>"$JSONL"
      log "round $round $wl $side: $(printf '%s' "$line" | python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); print(round(d["jobs_per_s"]), "jobs/s,", d["server_cpu_us_per_job"], "us/job, p50", d["lat_p50_us"], "p99", d["lat_p99_us"], "us")')"
      rm -rf "$dir"
    done
  done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$JSONL" "$LOAD_BEFORE" "$LOAD_AFTER" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print(f"load average before: {sys.argv[2]}; after: {sys.argv[3]}")
print("| workload | A jobs/s | B jobs/s | B/A | A CPU µs/job | B CPU µs/job | B/A | A p50/p99 µs | B p50/p99 µs | rounds |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for wl in dict.fromkeys(r["wl"] for r in runs):
    side = {s: [r for r in runs if r["wl"] == wl and r["side"] == s] for s in "ab"}
    jps = {s: statistics.median(r["jobs_per_s"] for r in side[s]) for s in "ab"}
    cpu = {s: statistics.median(r["server_cpu_us_per_job"] for r in side[s]) for s in "ab"}
    lat = {s: "/".join(f"{statistics.median(r[k] for r in side[s]):,.0f}" for k in ("lat_p50_us", "lat_p99_us")) for s in "ab"}
    print(f"| {wl} | {jps['a']:,.0f} | {jps['b']:,.0f} | {jps['b'] / jps['a']:.3f} | "
          f"{cpu['a']:.2f} | {cpu['b']:.2f} | {cpu['b'] / cpu['a']:.3f} | {lat['a']} | {lat['b']} | {len(side['a'])} |")
EOF
