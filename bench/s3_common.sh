# shellcheck shell=bash
# Shared setup for bench/s3_requests.sh, bench/lambda_cold.sh and bench/upload_throughput.sh.
# Sourced, not run. Sets: here, repo, work, venv, py, quarry; an EXIT trap that stops every
# process recorded in $work/pids (each leads its own process group) and removes $work.
#
# Knobs: BENCH_S3_VENV (default bench/.venv-aws, git-ignored), BENCH_WORK (scratch dir; default
# mktemp, removed at exit unless BENCH_KEEP=1), QUARRY_BIN (use this binary, no build),
# SKIP_BUILD=1 (use the existing target/release/quarry), PYTHON (default python3),
# S3S_FS (default: s3s-fs on PATH or ~/.cargo/bin; installed with cargo if missing).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
venv="${BENCH_S3_VENV:-$here/.venv-aws}"
python="${PYTHON:-python3}"
if [[ -n "${BENCH_WORK:-}" ]]; then
    work="$BENCH_WORK"
    mkdir -p "$work"
else
    work="$(mktemp -d "${TMPDIR:-/tmp}/quarry-s3bench.XXXXXX")"
fi
: > "$work/pids"

log() { printf '[bench] %s\n' "$*" >&2; }

# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
    local status=$?
    if [[ -f "$work/pids" ]]; then
        while read -r pid; do
            [[ "$pid" =~ ^[0-9]+$ ]] || continue
            kill -TERM -- "-$pid" 2>/dev/null || true
        done < "$work/pids"
    fi
    if [[ "${BENCH_KEEP:-0}" != 1 && -z "${BENCH_WORK:-}" ]]; then
        rm -rf "$work"
    else
        echo "kept scratch directory $work" >&2
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Python tools: awscli, boto3, moto's server (and extra packages given as arguments).
ensure_venv() {
    if [[ ! -x "$venv/bin/python" ]]; then
        log "creating venv $venv"
        "$python" -m venv "$venv"
    fi
    local want=(awscli boto3 'moto[server]' "$@") missing=0
    "$venv/bin/python" -c 'import boto3, awscli, moto, flask' 2>/dev/null || missing=1
    for extra in "$@"; do
        [[ "$extra" == cargo-lambda ]] && [[ ! -x "$venv/bin/cargo-lambda" ]] && missing=1
    done
    if [[ $missing == 1 ]]; then
        log "installing ${want[*]} into $venv"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${want[@]}"
    fi
    py="$venv/bin/python"
}

ensure_s3s_fs() {
    S3S_FS="${S3S_FS:-$(command -v s3s-fs || true)}"
    [[ -z "$S3S_FS" && -x "$HOME/.cargo/bin/s3s-fs" ]] && S3S_FS="$HOME/.cargo/bin/s3s-fs"
    if [[ -z "$S3S_FS" ]]; then
        # 0.14.1: later releases need a newer rustc than this workspace's.
        log "installing s3s-fs 0.14.1 with cargo (about 3 minutes)"
        cargo install --locked s3s-fs@0.14.1 --features binary
        S3S_FS="$HOME/.cargo/bin/s3s-fs"
    fi
    export S3S_FS
}

# The quarry binary, copied so a concurrent build in the shared target/ cannot swap it mid-run.
ensure_quarry() {
    local src
    if [[ -n "${QUARRY_BIN:-}" ]]; then
        src="$QUARRY_BIN"
    else
        if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
            log "cargo build --release -p quarry"
            (cd "$repo" && cargo build --release -p quarry --quiet)
        fi
        src="$repo/target/release/quarry"
    fi
    cp "$src" "$work/quarry"
    quarry="$work/quarry"
    log "quarry: $src ($("$quarry" --version), git $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$repo" diff --quiet 2>/dev/null || echo ', dirty work tree'))"
}

versions_line() {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ); $("$quarry" --version); git $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$repo" diff --quiet 2>/dev/null || echo ' (dirty)'); s3s-fs $("$S3S_FS" --version | awk '{print $2}'); $("$venv/bin/aws" --version 2>&1 | cut -d' ' -f1-2); moto $("$py" -c 'import moto; print(moto.__version__)'); boto3 $("$py" -c 'import boto3; print(boto3.__version__)'); nproc $(nproc); load $(cut -d' ' -f1-3 /proc/loadavg)"
}
