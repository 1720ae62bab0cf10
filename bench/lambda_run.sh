#!/usr/bin/env bash
# The Lambda bootstrap as the template drives it (bench/lambda_run.py):
#   1. a simulated TheRock run on moto: 500 artifact archives, 500 .debs, 500 .rpms and 30 wheels
#      land over three stages; their EventBridge events reach the function in SQS batches of 10.
#      S3 requests per landed object and Lambda-seconds per run.
#   2. one event on a large pip root (s3s-fs; PROJECTS x VERSIONS wheels, default 10,000 x 10):
#      init time over several cold starts and peak RSS.
#
#   bench/lambda_run.sh                               # both (the 100,000-wheel root takes a while)
#   WHAT=run bench/lambda_run.sh                      # the TheRock run only (about 5 minutes)
#   WHAT=big PROJECTS=1000 bench/lambda_run.sh        # 10,000 wheels
#
# Binaries: QUARRY_BIN / SKIP_BUILD as in s3_common.sh; LAMBDA_BOOTSTRAP (default
# target/lambda/quarry-lambda-indexer/bootstrap, else target/release/quarry-lambda-indexer,
# built if missing). FIXTURES: a directory with deb/ and rpm/ from
# `tests/fixtures/native/build.sh DIR --many 500` (built into the scratch directory if unset;
# needs dpkg-deb and rpmbuild). Knobs: ARTIFACTS, DEBS, RPMS, WHEELS, BATCH, PROJECTS, VERSIONS,
# SHA256SUM=0 (artifact archives without the .sha256sum siblings TheRock uploads with them).
source "$(dirname "${BASH_SOURCE[0]}")/s3_common.sh"

what=${WHAT:-run big}
ensure_venv
ensure_quarry
ensure_s3s_fs
bootstrap="${LAMBDA_BOOTSTRAP:-$repo/target/lambda/quarry-lambda-indexer/bootstrap}"
if [[ ! -x "$bootstrap" ]]; then
    bootstrap="$repo/target/release/quarry-lambda-indexer"
    if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
        log "cargo build --release -p quarry-lambda-indexer"
        (cd "$repo" && cargo build --release --quiet -p quarry-lambda-indexer --bin quarry-lambda-indexer)
    fi
fi
[[ -x "$bootstrap" ]] || { log "no bootstrap at $bootstrap"; exit 1; }
cp "$bootstrap" "$work/bootstrap"
command -v zstd >/dev/null || { log "zstd is missing (apt-get install zstd)"; exit 1; }

if [[ "$what" == *run* ]]; then
    fixtures="${FIXTURES:-$work/fixtures}"
    n=$(( ${DEBS:-500} > ${RPMS:-500} ? ${DEBS:-500} : ${RPMS:-500} ))
    if [[ ! -d "$fixtures/deb" ]]; then
        log "building $n .debs and .rpms (tests/fixtures/native/build.sh --many $n)"
        "$repo/tests/fixtures/native/build.sh" "$fixtures" --many "$n" >/dev/null
    fi
    echo "### A simulated TheRock run through the Lambda on moto"
    echo
    "$py" "$here/lambda_run.py" run --work "$work" --quarry "$quarry" --bootstrap "$work/bootstrap" \
        --fixtures "$fixtures" --artifacts "${ARTIFACTS:-500}" --debs "${DEBS:-500}" --rpms "${RPMS:-500}" \
        --wheels "${WHEELS:-30}" --batch "${BATCH:-10}" $([[ "${SHA256SUM:-1}" == 0 ]] && echo --no-sha256sum)
    echo
fi
if [[ "$what" == *big* ]]; then
    echo "### The Lambda on a root of $(( ${PROJECTS:-10000} * ${VERSIONS:-10} )) wheels (s3s-fs)"
    echo
    "$py" "$here/lambda_run.py" big --work "$work" --quarry "$quarry" --bootstrap "$work/bootstrap" \
        --projects "${PROJECTS:-10000}" --versions "${VERSIONS:-10}"
    echo
fi
echo "$(versions_line); bootstrap $(sha256sum "$work/bootstrap" | cut -c1-16)"
