#!/usr/bin/env bash
# jobyard on PostgreSQL against its peers on one PostgreSQL 15, in one run (issue 27's
# benchmarks): drain of 50,000 jobs and 200/s latency vs graphile-worker, durable put
# latency vs a bare INSERT, leader CPU per job vs the file log, failover and standby lag;
# with --compaction, the 1 M-job compaction check. Writes bench/results/<UTC>-pg.md and
# .jsonl (the report says what could not be measured and the load average).
#
#   bash bench/pg/run.sh [--binary PATH] [--sections drain,latency,put,cpu,failover,lag]
#                        [--compaction] [--rounds N] [--kills N] [--jobs N] [--consumers N]
#                        [--commit REV] [--out DIR]
#
# It makes its own PostgreSQL (initdb in a temp dir on a free port, default settings but
# fsync on; tests/pg_testlib.py), installs graphile-worker into bench/pg/node_modules from
# the committed lock (npm ci, once), and builds release jobyard and jobyard-bench unless
# --binary names a jobyard (jobyard-bench is then target/release/jobyard-bench, built if
# missing; --commit names the commit that binary was built from, for the report). Other
# flags go to bench/pg/run.py (see its --help).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

BINARY=""
COMMIT=""
SECTIONS="drain,latency,put,cpu,failover,lag"
OUT="$ROOT/bench/results"
PASS=()
while [ $# -gt 0 ]; do
  case $1 in
    --binary) BINARY=$2; shift ;;
    --commit) COMMIT=$2; shift ;;
    --sections) SECTIONS=$2; shift ;;
    --compaction) SECTIONS="$SECTIONS,compaction" ;;
    --out) OUT=$2; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) PASS+=("$1") ;;
  esac
  shift
done

command -v node >/dev/null || die "node is needed for graphile-worker (apt-get install nodejs npm)"
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || die "PostgreSQL is needed (apt-get install postgresql)"
if [ ! -d "$ROOT/bench/pg/node_modules/graphile-worker" ]; then
  log "installing graphile-worker (npm ci in bench/pg)"
  (cd "$ROOT/bench/pg" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
if [ -z "$BINARY" ]; then
  build_release
  BINARY=$JY
  COMMIT=$(cd "$ROOT" && git rev-parse --short HEAD)$(cd "$ROOT" && git diff --quiet HEAD -- crates Cargo.toml || echo ' with uncommitted changes')
elif [ ! -x "$JB" ]; then
  (cd "$ROOT" && cargo build --release --quiet -p jobyard-bench)
fi
# Copies, so that a build by someone else during the run cannot swap the binaries.
TMPBIN=$(mktemp -d /tmp/jobyard-pgbench-bin.XXXXXX)
trap 'rm -rf "$TMPBIN"' EXIT
cp "$BINARY" "$TMPBIN/jobyard"
cp "$JB" "$TMPBIN/jobyard-bench"

mkdir -p "$OUT"
STAMP=$(date -u +%Y-%m-%dT%H%MZ)
BASE="$OUT/$STAMP-pg"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
START=$(date +%s)
python3 "$ROOT/bench/pg/run.py" --binary "$TMPBIN/jobyard" --bench "$TMPBIN/jobyard-bench" \
  --sections "$SECTIONS" --jsonl "$BASE.jsonl" --summary "$BASE.summary.json" "${PASS[@]}"
{
  echo "# jobyard on PostgreSQL: $STAMP"
  echo
  machine_facts | grep -v -e '^- peers' -e '^- jobyard:'
  echo "- PostgreSQL: $(ls -d /usr/lib/postgresql/*/ | xargs -n1 basename | sort -n | tail -1) (Debian), initdb defaults, fsync on; graphile-worker $(node -p "require('$ROOT/bench/pg/node_modules/graphile-worker/package.json').version"), node $(node --version)"
  echo "- jobyard: ${COMMIT:-commit not given} ($("$BINARY" --version)), $BINARY"
  echo "- load average before $LOAD_BEFORE, after $(cut -d' ' -f1-3 /proc/loadavg); $(( $(date +%s) - START )) s"
  echo "- raw lines: [$STAMP-pg.jsonl]($STAMP-pg.jsonl)"
  echo
  python3 "$ROOT/bench/pg/report.py" "$BASE.summary.json"
} >"$BASE.md"
rm -f "$BASE.summary.json.tmp"
log "report: $BASE.md"
cat "$BASE.md"
