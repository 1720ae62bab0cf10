#!/usr/bin/env bash
# `+1 wheel` into a big pip root with the split state: each extra wheel lands and its own event
# (`quarry index --key`, what the Lambda and the server run for one object) is timed, with peak
# RSS, CPU and the bytes written, once with the find-links page off and once on. The root is
# indexed from scratch first (that time is printed too). `span` is the command's own elapsed
# time from its `store operations` log line (store opened → done: the event without process
# start-up), beside the whole process's CPU.
#
#   bench/plus_one.sh QUARRY DATA
#
#   QUARRY  the (release) binary to time
#   DATA    what bench/gen_wheels.py --out DATA --extra K wrote (DATA/wheels, DATA/extra)
#   WORK    scratch directory (default: a temporary one under $TMPDIR)
set -euo pipefail

quarry="$(realpath "$1")"
data="$(realpath "$2")"
work="${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/quarry-plus-one.XXXXXX")}"
trap 'rm -rf "$work"' EXIT
mapfile -t extras < <(ls "$data/extra")
[[ ${#extras[@]} -gt 0 ]] || { echo "no extra wheels in $data/extra (gen_wheels.py --extra K)" >&2; exit 2; }
wheels="$(ls "$data/wheels" | wc -l)"

bytes_since() { # marker directory: bytes of regular files changed after marker (outside .quarry/)
    find "$2" -path "$2/.quarry" -prune -o -type f -newer "$1" -printf '%s\n' | awk '{s+=$1} END {print s+0}'
}

timed() { # label command...: one line "label wall_s cpu_s maxrss_MiB"
    local label="$1"; shift
    /usr/bin/time -f "%e %U %S %M" -o "$work/time" "$@" >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
    read -r wall user sys rss < "$work/time"
    printf '%-44s wall %6.2f s  cpu %6.3f s  peak RSS %5d MiB' "$label" "$wall" "$(echo "$user + $sys" | bc)" "$((rss / 1024))"
}

echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg); $wheels wheels in the root"
for links in false true; do
    store="$work/store-$links"
    rm -rf "$store" && mkdir -p "$store/chan"
    cat > "$work/quarry.toml" <<EOF
[layout]
runs = false
[[layout.root]]
prefix = "chan/"
kind = "pip"
find_links = $links
EOF
    cp -a "$data/wheels/." "$store/chan/"
    sync
    echo "== find-links page $([[ $links == true ]] && echo on || echo off)"
    timed "from scratch ($wheels wheels)" "$quarry" index "$store" --config "$work/quarry.toml"
    echo
    for extra in "${extras[@]}"; do
        touch "$work/marker" && sleep 0.01
        cp "$data/extra/$extra" "$store/chan/$extra"
        touch "$work/marker" && sleep 0.01
        timed "+1 $extra" "$quarry" index "$store" --config "$work/quarry.toml" --key "chan/$extra" -v
        span="$(sed 's/\x1b\[[0-9;]*m//g' "$work/err" | grep -o 'elapsed_ms=[0-9]*' | tail -1 | cut -d= -f2)"
        echo "  span ${span:-?} ms  wrote $(bytes_since "$work/marker" "$store") B"
    done
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
