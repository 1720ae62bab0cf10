#!/usr/bin/env bash
# A new user's first hour, timed: `git clone` of this repository into a scratch directory, then
# `scripts/demo` (a release build of `quarry` with an empty target directory, `quarry serve`,
# an upload, `pip install` through the find-links page and through the simple API).
#
#   bench/first_hour.sh                 # cold target/, the machine's crates.io cache
#   bench/first_hour.sh --cold-registry # also an empty CARGO_HOME: every crate downloaded
#
# Prints one line per phase and the total, in seconds. The clone is removed afterwards.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ "${1:-}" = "--cold-registry" ]; then
  export CARGO_HOME=$work/cargo-home
  mkdir -p "$CARGO_HOME"
fi
unset CARGO_TARGET_DIR
now() { date +%s.%N; }
t0=$(now)
git clone --quiet "$repo" "$work/quarry"
t1=$(now)
(cd "$work/quarry" && cargo fetch --locked --quiet)
t2=$(now)
(cd "$work/quarry" && cargo build --release -p quarry --locked --quiet)
t3=$(now)
(cd "$work/quarry" && scripts/demo) > "$work/demo.log"
t4=$(now)
grep -c '^installed quarry-hello 1.0.0$' "$work/demo.log" | grep -qx 2 || { cat "$work/demo.log" >&2; exit 1; }
awk -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" -v e="$t4" -v cores="$(nproc)" -v load="$(cut -d' ' -f1 /proc/loadavg)" 'BEGIN {
  printf "git clone         %7.1f s\n", b - a
  printf "cargo fetch       %7.1f s\n", c - b
  printf "cargo build       %7.1f s  (release, empty target/)\n", d - c
  printf "scripts/demo      %7.1f s  (serve, upload, two pip installs)\n", e - d
  printf "total             %7.1f s  on %d cores, load %s at the end\n", e - a, cores, load
}'
