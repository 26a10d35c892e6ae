#!/usr/bin/env bash
# The whole test suite: the README's test command, and what .ci/run calls.
#   1. installs what the tests need (scripts/setup.sh, idempotent)
#   2. formatting and lints
#   3. unit, property and black-box tests (cargo test: builds the real binary)
#   4. real-client, crash and smoke tests against the built binary (pytest), and the Node
#      client's tests (node --test)
#   5. every fuzz target for a few seconds (scripts/fuzz.sh; needs a nightly toolchain)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
cargo fmt --all --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
cargo build --workspace --quiet
# Each stage has a ceiling, so a hang is reported as a failure of that stage long before
# CI's own limit; pytest also stops any single test after pytest.ini's timeout.
timeout --foreground 1500 cargo test --workspace --quiet 2>&1 | tee target/cargo-test.log
# Tests that mount a tmpfs need root: `cargo test` reports them ignored; run them as root
# (CI is), where they must pass (run without root, they fail rather than pass unrun).
if [ "$(id -u)" -eq 0 ]; then
  timeout --foreground 300 cargo test -p jobyard-storage --test disk_full --quiet -- --ignored 2>&1 | tee -a target/cargo-test.log
  timeout --foreground 300 cargo test -p jobyard --test storage_faults --quiet -- --ignored 2>&1 | tee -a target/cargo-test.log
else
  echo "not root: the tmpfs tests (disk_full, storage_faults) stay ignored"
fi
timeout --foreground 1500 python3 -m pytest -q -rfE tests
# The Node client (clients/node) against the real server, with Node's own test runner.
timeout --foreground 600 node --test --test-timeout=120000 clients/node/test/*.test.js
# The Python client (clients/python) against the real server.
timeout --foreground 300 python3 -m pytest -q -rfE clients/python/tests
bash scripts/fuzz.sh "${JOBYARD_FUZZ_SECONDS:-10}"
