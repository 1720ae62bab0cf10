#!/usr/bin/env bash
# S3 requests per upload event into a root that already holds 10,000 wheels, against a full sweep.
#
#   bench/s3_requests.sh                      # s3s-fs and moto, 10,000 wheels (about 5 minutes)
#   SERVERS=s3s-fs PROJECTS=30 bench/s3_requests.sh   # smoke run
#
# For each server (fresh, on a free loopback port): seed s3://bench/9999-linux/python/ with
# PROJECTS x VERSIONS wheels (gen_wheels.py), `quarry index s3://bench/` from scratch, a no-op
# run, then `quarry upload` of one more wheel and `quarry index s3://bench/ --prefix ROOT` (the
# per-event cost: the same Indexer::reindex on an S3Store that the Lambda runs), the same in
# the default "verify" mode, and `quarry index --force`. The anchor is a full sweep computed from
# the listing: list pages + one GET per package file. Prints a markdown report on stdout.
# Knobs: SERVERS (default "s3s-fs moto"), PROJECTS (1000), VERSIONS (10), and s3_common.sh's.
source "$(dirname "${BASH_SOURCE[0]}")/s3_common.sh"

# shellcheck disable=SC2119
ensure_venv
ensure_s3s_fs
ensure_quarry
# shellcheck disable=SC2086
"$py" "$here/s3bench.py" requests --work "$work" --quarry "$quarry" --servers ${SERVERS:-s3s-fs moto} \
    --projects "${PROJECTS:-1000}" --versions "${VERSIONS:-10}"
echo
versions_line
