#!/usr/bin/env bash
# `quarry upload` vs `aws s3 cp` into the same s3s-fs server on loopback: one 1 GiB random file
# and a directory of 200 x 1 MiB random files. Prints MB/s for each and the ratio.
#
#   bench/upload_throughput.sh                # about 2 minutes; needs ~3 GiB free in $TMPDIR
#   BIG_MIB=256 SMALL_FILES=50 bench/upload_throughput.sh   # smaller
#
# Knobs: BIG_MIB (1024), SMALL_FILES (200), SMALL_MIB (1), RUNS (1; median reported), and
# s3_common.sh's.
source "$(dirname "${BASH_SOURCE[0]}")/s3_common.sh"

# shellcheck disable=SC2119
ensure_venv
ensure_s3s_fs
ensure_quarry
"$py" "$here/s3bench.py" upload --work "$work" --quarry "$quarry" --aws "$venv/bin/aws" \
    --big-mib "${BIG_MIB:-1024}" --small-files "${SMALL_FILES:-200}" --small-mib "${SMALL_MIB:-1}" \
    --runs "${RUNS:-1}"
echo
versions_line
