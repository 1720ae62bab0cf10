#!/usr/bin/env bash
# A channel rollback's S3 requests and wall time on moto, for a small and a large channel
# (goal: independent of the channel's size); see bench/channel_rollback.py.
#
#   bench/channel_rollback.sh                  # 12 and 1,502 wheels
#   SIZES=5x2 bench/channel_rollback.sh        # smoke run
#
# Knobs: SIZES (PROJECTSxVERSIONS,...; default 5x2,150x10), and s3_common.sh's (BENCH_S3_VENV,
# QUARRY_BIN, SKIP_BUILD, ...). A venv that already has boto3 and moto's server is used as it is.
source "$(dirname "${BASH_SOURCE[0]}")/s3_common.sh"

if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c 'import boto3, moto, flask' 2>/dev/null; then
    py="$venv/bin/python"
else
    # shellcheck disable=SC2119
    ensure_venv
fi
ensure_quarry
"$py" "$here/channel_rollback.py" --work "$work" --quarry "$quarry" --sizes "${SIZES:-5x2,150x10}"
