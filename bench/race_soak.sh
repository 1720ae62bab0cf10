#!/usr/bin/env bash
# Soak the Lambda race suite: tests/s3_events.rs's race (64 concurrent uploads into one root on
# moto, every S3 notification drained from SQS, delivered twice in shuffled batches to 8
# concurrent handler invocations, pages audited mid-flight) for 100 trials instead of 20.
# Usage: bench/race_soak.sh [TRIALS]   (needs the test virtualenv: run scripts/test once)
set -euo pipefail
cd "$(dirname "$0")/.."
trials=${1:-100}
export QUARRY_RACE_TRIALS=$trials
start=$(date +%s)
cargo nextest run -p quarry-tests --test e2e s3_events::racing_uploads --no-capture 2>&1 \
  | grep -E '^trial|trials of|PASS|FAIL|panicked'
echo "soak: $trials trials passed in $(( $(date +%s) - start )) s"
