#!/usr/bin/env bash
# `+1 wheel` through the Lambda bootstrap on moto, at several root sizes (bench/lambda_big.py):
# S3 requests per event (moto's own log, moto in the driver's process), bytes PUT, CPU of the
# event, init over cold starts and the bootstrap's peak RSS, with the find-links page off and on.
#
#   bench/lambda_big.sh                         # 1,000, 10,000 and 100,000 wheels
#   SIZES="100 1000" bench/lambda_big.sh        # projects per size (10 wheels each)
#
# Data: DATA_DIR/p{PROJECTS} from `bench/gen_wheels.py --projects P --extra 4` (generated when
# missing; 100,000 wheels take about 40 s and 332 MB). Binaries: QUARRY_BIN / SKIP_BUILD as in
# s3_common.sh; LAMBDA_BOOTSTRAP (default target/release/quarry-lambda-indexer, built).
source "$(dirname "${BASH_SOURCE[0]}")/s3_common.sh"

ensure_venv
ensure_quarry
bootstrap="${LAMBDA_BOOTSTRAP:-$repo/target/release/quarry-lambda-indexer}"
if [[ -z "${LAMBDA_BOOTSTRAP:-}" && "${SKIP_BUILD:-0}" != 1 ]]; then
    log "cargo build --release -p quarry-lambda-indexer"
    (cd "$repo" && cargo build --release --quiet -p quarry-lambda-indexer --bin quarry-lambda-indexer)
fi
[[ -x "$bootstrap" ]] || { log "no bootstrap at $bootstrap"; exit 1; }
cp "$bootstrap" "$work/bootstrap"

data_dir="${DATA_DIR:-$work/data}"
dirs=()
for p in ${SIZES:-100 1000 10000}; do
    d="$data_dir/p$p"
    if [[ ! -f "$d/manifest.json" ]]; then
        log "generating $((p * 10)) wheels into $d"
        "$python" "$here/gen_wheels.py" --out "$d" --projects "$p" --extra 4 >&2
    fi
    dirs+=("$d")
done
echo "### \`+1 wheel\` through the Lambda on moto (bench/lambda_big.sh)"
echo
"$py" "$here/lambda_big.py" "${dirs[@]}" --work "$work" --quarry "$quarry" --bootstrap "$work/bootstrap" \
    --cold "${COLD:-5}" --json "$work/results.json"
echo
echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ); $("$quarry" --version); git $(git -C "$repo" rev-parse --short HEAD); moto $("$py" -c 'import moto; print(moto.__version__)'); bootstrap $(sha256sum "$work/bootstrap" | cut -c1-16); nproc $(nproc)"
