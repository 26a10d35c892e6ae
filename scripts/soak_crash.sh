#!/usr/bin/env bash
# Soak test, run on purpose (not in CI): kill -9 cycles of the real server under mixed
# beanstalkd + Gearman load, with compaction forced by tiny segments; after every restart
# each acknowledged job must be back exactly once (tests/test_soak_crash.py).
#
#   scripts/soak_crash.sh [CYCLES]      (default 100; or SOAK_CYCLES=N)
#
# Uses $JOBYARD_BIN if set, else builds and uses target/debug/jobyard. Needs the Python
# clients scripts/setup.sh installs (greenstalk, gearman3, pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
cycles="${1:-${SOAK_CYCLES:-100}}"
if [[ -z "${JOBYARD_BIN:-}" ]]; then
  cargo build -p jobyard
  export JOBYARD_BIN="$PWD/target/debug/jobyard"
fi
export SOAK_CYCLES="$cycles"
echo "soak: $cycles kill -9 cycles with $JOBYARD_BIN"
exec python3 -m pytest -q -s tests/test_soak_crash.py
