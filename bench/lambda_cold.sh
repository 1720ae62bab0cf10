#!/usr/bin/env bash
# The Lambda bootstrap's cold init time and peak RSS on a root of 10,000 wheels.
#
#   bench/lambda_cold.sh                      # s3s-fs and moto (about 4 minutes after the build)
#
# Needs target/lambda/quarry-lambda-indexer/bootstrap: if it is missing and no `cargo lambda
# build` is running, it is built (`cargo lambda build --release -p quarry-lambda-indexer`, with
# cargo-lambda and ziglang from PyPI in the bench venv); if a build is running, this waits for it
# (checked every minute, up to LAMBDA_WAIT_MIN, default 20). LAMBDA_BOOTSTRAP overrides the path.
#
# For each server: seed and index the root (quarry), start `cargo lambda watch
# --only-lambda-apis` on a free port, `quarry upload` one new wheel, spawn the bootstrap with the
# invocation for it queued, and time spawn → first runtime-API poll (init) and → response; then a
# warm invocation for another new wheel and a duplicate event; VmHWM from /proc/PID/status.
# Knobs: SERVERS (default "s3s-fs moto"), PROJECTS, VERSIONS, and s3_common.sh's.
source "$(dirname "${BASH_SOURCE[0]}")/s3_common.sh"

ensure_venv cargo-lambda
export PATH="$venv/bin:$PATH"
ensure_s3s_fs
ensure_quarry

bootstrap="${LAMBDA_BOOTSTRAP:-$repo/target/lambda/quarry-lambda-indexer/bootstrap}"
if [[ ! -x "$bootstrap" ]]; then
    waited=0
    while [[ ! -x "$bootstrap" ]] && pgrep -f 'cargo-lambda lambda build' >/dev/null; do
        (( waited >= ${LAMBDA_WAIT_MIN:-20} )) && { log "gave up waiting for $bootstrap"; exit 1; }
        log "a cargo lambda build is running; waiting for $bootstrap ($waited min so far)"
        sleep 60
        waited=$((waited + 1))
    done
fi
if [[ ! -x "$bootstrap" ]]; then
    "$py" -c 'import ziglang' 2>/dev/null || "$py" -m pip install --quiet ziglang
    log "cargo lambda build --release -p quarry-lambda-indexer"
    (cd "$repo" && cargo lambda build --release -p quarry-lambda-indexer --bin quarry-lambda-indexer)
fi
cp "$bootstrap" "$work/bootstrap"

# shellcheck disable=SC2086
"$py" "$here/s3bench.py" lambda --work "$work" --quarry "$quarry" --bootstrap "$work/bootstrap" \
    --cargo cargo --servers ${SERVERS:-s3s-fs moto} --projects "${PROJECTS:-1000}" \
    --versions "${VERSIONS:-10}"
echo
echo "$(versions_line); bootstrap $(sha256sum "$work/bootstrap" | cut -c1-16)"
