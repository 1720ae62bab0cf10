#!/usr/bin/env bash
# `quarry upload --wait` into a moto bucket the Lambda handler indexes (S3 → SQS → handler, as
# tests/consistency.rs drives it): ROUNDS uploads of one wheel each; prints the time each took
# from the upload's end to "indexed" (the pages list the wheel with its sha256), then p50 and max.
#
#   bench/upload_wait.sh            # 20 rounds
#   ROUNDS=5 bench/upload_wait.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-20}
cargo build -p quarry --quiet
log=$(mktemp)
trap 'rm -f "$log"' EXIT
QUARRY_WAIT_ROUNDS=$rounds cargo nextest run -p quarry-tests --no-capture \
  -E 'test(=consistency::an_upload_with_wait_returns_once_the_lambda_indexed_it)' >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
grep -o 'wait round [0-9]*: [0-9.]*' "$log" | awk '{print $4}' | sort -n | awk -v n="$rounds" '
  { v[NR] = $1 } END {
    if (NR == 0) { print "no rounds measured" > "/dev/stderr"; exit 1 }
    printf "rounds %d, seconds from upload end to indexed: p50 %.3f, max %.3f, min %.3f\n", NR, v[int((NR + 1) / 2)], v[NR], v[1]
  }'
