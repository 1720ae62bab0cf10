#!/usr/bin/env bash
# quarry promote --release-type dev of a 1,500-wheel kpack run into TheRock's v5 layout on moto,
# against publish_rocm_to_release_buckets.py's approach (one CopyObject per object, then the
# structured index regenerated whole, as manage_structured.py does): wall time and S3 requests.
#
#   bench/promote_v5.sh                      # 150 projects x 10 versions
#   PROJECTS=20 bench/promote_v5.sh          # smoke run
#   QUARRY_BIN=target/debug/quarry BENCH_S3_VENV=/work/main/.venv bench/promote_v5.sh
#
# Knobs: PROJECTS (150), VERSIONS (10), and s3_common.sh's (BENCH_S3_VENV, QUARRY_BIN, ...).
source "$(dirname "${BASH_SOURCE[0]}")/s3_common.sh"

# boto3 and moto's server are all this bench needs (no awscli).
if "$venv/bin/python" -c 'import boto3, moto, flask' 2>/dev/null; then
    py="$venv/bin/python"
else
    # shellcheck disable=SC2119
    ensure_venv
fi
ensure_quarry
"$py" "$here/promote_v5.py" --work "$work" --quarry "$quarry" \
    --projects "${PROJECTS:-150}" --versions "${VERSIONS:-10}"
echo
echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ); $("$quarry" --version); git $(git -C "$repo" rev-parse --short HEAD); moto $("$py" -c 'import moto; print(moto.__version__)'); nproc $(nproc); load $(cut -d' ' -f1-3 /proc/loadavg)"
