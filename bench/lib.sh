# shellcheck shell=bash
# shellcheck disable=SC2034,SC2154  # sets work/quarry/quarry_rev for, and reads repo from, the sourcing script
# Shared by bench/native.sh and bench/package.sh (source it; not run on its own).
#
#   bench_setup NAME   a scratch directory in $work (removed at exit unless BENCH_KEEP=1),
#                      log/die printing "[NAME] …" to stderr
#   bench_quarry       build target/release/quarry (unless SKIP_BUILD=1) and copy it to
#                      $quarry, with $quarry_rev naming the commit; QUARRY_BIN=path takes
#                      that binary instead (a before/after comparison)
#   bench_host         nproc, memory, cpu, filesystem and load lines for a results header

bench_setup() {
    bench_name=$1
    work="$(mktemp -d "${TMPDIR:-/tmp}/quarry-$bench_name.XXXXXX")"
    trap bench_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# shellcheck disable=SC2317  # invoked by the EXIT trap
bench_cleanup() {
    local status=$?
    if [[ "${BENCH_KEEP:-0}" == 1 ]]; then echo "kept scratch directory $work" >&2; else rm -rf "$work"; fi
    exit "$status"
}

log() { printf '[%s] %s\n' "$bench_name" "$*" >&2; }
die() { printf '[%s] FAILED: %s\n' "$bench_name" "$*" >&2; exit 1; }

bench_quarry() {
    if [[ -n "${QUARRY_BIN:-}" ]]; then
        cp "$QUARRY_BIN" "$work/quarry"
        quarry="$work/quarry"
        quarry_rev="binary $QUARRY_BIN"
        return
    fi
    if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
        log "building quarry (release)"
        (cd "$repo" && cargo build --release --quiet --bin quarry)
    fi
    [[ -x "$repo/target/release/quarry" ]] || die "no target/release/quarry"
    # A private copy: a concurrent build in the shared target dir must not swap it mid-run.
    cp "$repo/target/release/quarry" "$work/quarry"
    quarry="$work/quarry"
    quarry_rev="$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')"
    git -C "$repo" diff --quiet HEAD -- . ':!bench' 2>/dev/null || quarry_rev="$quarry_rev, dirty work tree"
}

bench_host() {
    echo "nproc: $(nproc)"
    echo "memory: $(free -h | awk '/^Mem:/ {print $2}')"
    echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | sed -n 1p)"
    echo "filesystem: $(df -hT "$work" | awk 'NR==2 {print $2}')"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
}
