#!/usr/bin/env bash
# quarry promote of a 1,500-wheel run on moto against `aws s3 cp --recursive` + `quarry index`.
#
#   bench/promote.sh                         # 150 projects x 10 versions (about a minute)
#   PROJECTS=20 bench/promote.sh             # smoke run
#
# Knobs: PROJECTS (150), VERSIONS (10), and s3_common.sh's (BENCH_S3_VENV, QUARRY_BIN, ...).
source "$(dirname "${BASH_SOURCE[0]}")/s3_common.sh"

# shellcheck disable=SC2119
ensure_venv
ensure_quarry
"$py" "$here/promote_bench.py" --work "$work" --quarry "$quarry" --aws "$venv/bin/aws" \
    --projects "${PROJECTS:-150}" --versions "${VERSIONS:-10}"
