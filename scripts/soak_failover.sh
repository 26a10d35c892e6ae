#!/usr/bin/env bash
# Failover soak, run on purpose (not in CI): its own PostgreSQL (initdb in a temp dir, as
# the tests make it), three jobyard nodes on it under a supervisor that restarts a node
# that exits (as systemd's Restart=on-failure), mixed load of real clients (beanstalkd via
# greenstalk, Gearman via gearman3, HTTP jobs and a two-stage HTTP flow), and the leader
# killed -9 N times at random moments. Prints `lost=... resurrected=... duplicated=...` and
# exits non-zero if anything acknowledged was lost or resurrected (scripts/soak_failover.py).
#
#   scripts/soak_failover.sh [N]      (default 20; or SOAK_KILLS=N; SOAK_SEED=S to repeat a run;
#                                      SOAK_FAULTS=crash,lost,paused to also pause the leader
#                                      past its lease, which must then step down)
#
# Uses $JOBYARD_BIN if set, else builds and uses target/debug/jobyard. Needs PostgreSQL's
# server package and the Python clients scripts/setup.sh installs (greenstalk, gearman3,
# requests). About 6-8 s per kill.
set -euo pipefail
cd "$(dirname "$0")/.."
kills="${1:-${SOAK_KILLS:-20}}"
if [[ -z "${JOBYARD_BIN:-}" ]]; then
  cargo build -p jobyard
  export JOBYARD_BIN="$PWD/target/debug/jobyard"
fi
exec python3 scripts/soak_failover.py "$kills" ${SOAK_SEED:+--seed "$SOAK_SEED"}
