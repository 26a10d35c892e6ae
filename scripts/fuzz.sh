#!/usr/bin/env bash
# Runs every fuzz target (fuzz/fuzz_targets: the beanstalkd decoder, the Gearman decoder, the
# log record decoder, the HTTP request decoders (flows too), the HTTP credentials decoder, the
# flow definition parser and flow records, the jobd decoder, the WMP decoder, the manager's
# ZMTP decoder) for SECONDS each (default 60) and fails on the first crash; the input that
# crashed is left in fuzz/artifacts/<target>/.
#
#   bash scripts/fuzz.sh [SECONDS]
#
# cargo-fuzz needs a nightly toolchain (sanitizer flags). Without one this says so and exits
# 0, so scripts/test.sh can call it on any machine; with one it installs cargo-fuzz if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}

if ! rustup toolchain list 2>/dev/null | grep '^nightly' >/dev/null; then
  echo "fuzz: no nightly toolchain (rustup toolchain install nightly); fuzzing skipped"
  exit 0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install --quiet --locked cargo-fuzz
fi

cd fuzz
cargo +nightly fuzz build -O
for target in $(cargo +nightly fuzz list); do
  mkdir -p "corpus/$target"
  echo "fuzz: $target for ${SECONDS_EACH}s"
  # -rss_limit_mb guards the bounded-memory promise: a decoder that buffers without limit
  # fails here.
  log=$(mktemp)
  if ! cargo +nightly fuzz run -O "$target" "corpus/$target" -- \
    -max_total_time="$SECONDS_EACH" -rss_limit_mb=1024 >"$log" 2>&1; then
    tail -40 "$log"
    echo "fuzz: $target FAILED (input saved under fuzz/artifacts/$target/)"
    exit 1
  fi
  grep -E '^Done' "$log"
  rm -f "$log"
done
