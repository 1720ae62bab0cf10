#!/usr/bin/env bash
# `quarry mirror` reading one big PEP 503 project page (upload/src/mirror_page.rs), for pages of
# growing size: the time from start to "no file matches" (the page fetched over loopback, parsed,
# filtered; nothing to download), median of RUNS runs per size.
#
#   bench/mirror_page.sh [QUARRY]          # QUARRY: the binary (default target/release/quarry)
#   SIZES="1000 10000" RUNS=5 bench/mirror_page.sh target/debug/quarry
#
# Each page has N anchors as PyPI writes them (an sdist and a wheel per version, sha256
# fragments, data-requires-python, data-core-metadata), about 420 bytes each. Prints a markdown
# table: anchors, page bytes, median seconds, anchors per second.
set -euo pipefail
cd "$(dirname "$0")/.."
quarry="${1:-target/release/quarry}"
sizes="${SIZES:-1000 5000 20000}"
runs="${RUNS:-3}"
work=$(mktemp -d "${TMPDIR:-/tmp}/quarry-mirror-page.XXXXXX")
server=""
cleanup() {
    [ -n "$server" ] && kill "$server" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

python3 - "$work/www" $sizes <<'PY'
import os, sys
base, sizes = sys.argv[1], [int(s) for s in sys.argv[2:]]
h = "0123456789abcdef" * 4
for n in sizes:
    os.makedirs(f"{base}/simple/big{n}", exist_ok=True)
    lines = ["<!DOCTYPE html><html><head><title>Links for big</title></head><body><h1>Links for big</h1>"]
    for i in range(n):
        v = f"1.{i // 2}"
        name = f"big{n}-{v}.tar.gz" if i % 2 else f"big{n}-{v}-cp312-cp312-manylinux_2_17_x86_64.whl"
        lines.append(
            f'<a href="https://files.example/packages/{h[:2]}/{h[2:4]}/{h}/{name}#sha256={h}" '
            f'data-requires-python="&gt;=3.8" data-core-metadata="sha256={h}">{name}</a><br />'
        )
    lines.append("</body></html>")
    with open(f"{base}/simple/big{n}/index.html", "w") as f:
        f.write("\n".join(lines))
PY

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 -m http.server "$port" --bind 127.0.0.1 --directory "$work/www" >/dev/null 2>&1 &
server=$!
for _ in $(seq 50); do
    curl -fs "http://127.0.0.1:$port/" >/dev/null 2>&1 && break
    sleep 0.1
done

echo "| anchors | page bytes | median s | anchors/s |"
echo "| ---: | ---: | ---: | ---: |"
for n in $sizes; do
    bytes=$(stat -c %s "$work/www/simple/big$n/index.html")
    times=()
    for _ in $(seq "$runs"); do
        rm -rf "$work/store"
        start=$(date +%s.%N)
        # No version 0 exists: the run ends with "no file matches" once the page is read.
        if "$quarry" mirror --store "$work/store" --to python-deps/ \
            --upstream "http://127.0.0.1:$port/simple/" --project "big$n==0" >"$work/out" 2>&1; then
            echo "unexpected success for big$n" >&2
            exit 1
        fi
        grep -q "no file of big$n==0" "$work/out" || { cat "$work/out" >&2; exit 1; }
        times+=("$(echo "$(date +%s.%N) - $start" | bc)")
    done
    median=$(printf '%s\n' "${times[@]}" | sort -n | sed -n "$(( (runs + 1) / 2 ))p")
    rate=$(echo "$n / $median" | bc)
    printf '| %s | %s | %.3f | %s |\n' "$n" "$bytes" "$median" "$rate"
done
