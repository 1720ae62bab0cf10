#!/usr/bin/env bash
# Quarry pip-indexer benchmark: the single entry point.
#
#   bench/run.sh                 # 10,000 wheels (1,000 projects x 10 versions), 3 runs each
#   PROJECTS=100 RUNS=1 bench/run.sh   # quick smoke run (RUNS needs 2*RUNS <= 8 extra wheels)
#
# Environment knobs:
#   BENCH_VENV   Python venv with dumb-pypi and pypiserver (default ~/.cache/quarry-bench-venv;
#                kept outside the repository and reused between runs)
#   BENCH_WORK   scratch directory (default: a new mktemp -d, removed at exit unless BENCH_KEEP=1)
#   PROJECTS     projects to generate (default 1000); VERSIONS per project (default 10)
#   RUNS         repetitions per measurement, median reported (default 3)
#   PYTHON       interpreter used to create the venv (default python3)
#   SKIP_BUILD=1 use the existing target/release/quarry
#   EATMYDATA    path to eatmydata (default: found on PATH, if installed); adds a run of
#                `quarry index` with fsync disabled, to show what durable writes cost. Optional:
#                `apt-get install eatmydata`.
#
# Prints the results table (markdown) on stdout; progress goes to stderr. Writes
# $BENCH_WORK/results.json and $BENCH_WORK/results.md. Exits non-zero if a check failed.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
venv="${BENCH_VENV:-$HOME/.cache/quarry-bench-venv}"
python="${PYTHON:-python3}"
projects="${PROJECTS:-1000}"
versions="${VERSIONS:-10}"
runs="${RUNS:-3}"

if [[ -n "${BENCH_WORK:-}" ]]; then
    work="$BENCH_WORK"
    mkdir -p "$work"
else
    work="$(mktemp -d "${TMPDIR:-/tmp}/quarry-bench.XXXXXX")"
fi
harness_pid=""

# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
    local status=$?
    # The harness kills its own servers; this is the backstop if it died without doing so.
    if [[ -n "$harness_pid" ]] && kill -0 "$harness_pid" 2>/dev/null; then
        kill -TERM "$harness_pid" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 "$harness_pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$harness_pid" 2>/dev/null || true
    fi
    if [[ -f "$work/pids" ]]; then
        while read -r pid; do
            [[ "$pid" =~ ^[0-9]+$ ]] || continue
            # Each server leads its own process group (start_new_session), so -pid reaches it
            # and anything it spawned, and nothing else.
            kill -TERM -- "-$pid" 2>/dev/null || true
        done < "$work/pids"
    fi
    if [[ "${BENCH_KEEP:-0}" != 1 && -z "${BENCH_WORK:-}" ]]; then
        rm -rf "$work"
    elif [[ "${BENCH_KEEP:-0}" == 1 ]]; then
        echo "kept scratch directory $work" >&2
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log() { printf '[bench] %s\n' "$*" >&2; }

# --- tools -----------------------------------------------------------------------------------
if [[ ! -x "$venv/bin/python" ]]; then
    log "creating venv $venv"
    "$python" -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import dumb_pypi, pypiserver, watchdog' 2>/dev/null; then
    log "installing dumb-pypi and pypiserver (with watchdog, for its cached-dir backend) into $venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet dumb-pypi 'pypiserver[cache]'
fi
for tool in dumb-pypi pypi-server; do
    [[ -x "$venv/bin/$tool" ]] || { echo "missing $venv/bin/$tool" >&2; exit 1; }
done

quarry="${CARGO_TARGET_DIR:-$repo/target}/release/quarry"
rev_before="$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')"
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
    log "building quarry (release)"
    (cd "$repo" && cargo build --release --quiet -p quarry)
fi
[[ -x "$quarry" ]] || { echo "no $quarry; build it with cargo build --release -p quarry" >&2; exit 1; }
# Bench a private copy: a later `cargo build` in the shared target dir must not swap the binary
# between runs.
cp "$quarry" "$work/quarry"
quarry_rev="$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')"
[[ "$quarry_rev" == "$rev_before" ]] || quarry_rev="$quarry_rev; HEAD was $rev_before when the build started"
git -C "$repo" diff --quiet HEAD -- . ':!bench' 2>/dev/null || quarry_rev="$quarry_rev, dirty work tree"
quarry="$work/quarry"

# --- versions (recorded with the results) -----------------------------------------------------
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "quarry: $("$quarry" --version) (git $quarry_rev; binary sha256 $(sha256sum "$quarry" | cut -c1-16))"
    echo "dumb-pypi: $("$venv/bin/python" -m pip show dumb-pypi 2>/dev/null | sed -n 's/^Version: //p')"
    echo "pypiserver: $("$venv/bin/python" -m pip show pypiserver 2>/dev/null | sed -n 's/^Version: //p')"
    echo "watchdog: $("$venv/bin/python" -m pip show watchdog 2>/dev/null | sed -n 's/^Version: //p')"
    echo "python: $("$venv/bin/python" --version 2>&1)"
    echo "pip: $("$venv/bin/python" -m pip --version | cut -d' ' -f1-2)"
    echo "rustc: $(rustc --version 2>/dev/null || echo '?')"
    echo "nproc: $(nproc)"
    echo "memory: $(free -h | awk '/^Mem:/ {print $2}')"
    echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
    echo "filesystem: $(df -hT "$work" | awk 'NR==2 {print $2}')"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$work/versions.txt"
cat "$work/versions.txt" >&2

# --- data ------------------------------------------------------------------------------------
extra=$((2 * runs))
log "generating $((projects * versions)) wheels ($projects projects x $versions versions) + $extra extra"
"$venv/bin/python" "$here/gen_wheels.py" --out "$work/data" --projects "$projects" \
    --versions "$versions" --extra "$extra"

# --- benches ---------------------------------------------------------------------------------
log "running the benches ($runs runs each)"
extra_args=()
eatmydata="${EATMYDATA:-$(command -v eatmydata || true)}"
if [[ -n "$eatmydata" ]]; then
    extra_args+=(--eatmydata "$eatmydata")
else
    log "eatmydata not found: skipping the fsync-disabled quarry run"
fi
set +e
"$venv/bin/python" "$here/bench.py" --quarry "$quarry" --venv "$venv" --data "$work/data" \
    --work "$work/run" --runs "$runs" --results-json "$work/results.json" "${extra_args[@]}" \
    > "$work/results.md" &
harness_pid=$!
wait "$harness_pid"
status=$?
harness_pid=""
set -e

echo
echo '```'
cat "$work/versions.txt"
echo '```'
echo
cat "$work/results.md"
exit "$status"
