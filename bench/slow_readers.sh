#!/usr/bin/env bash
# Slow readers against `quarry serve` (issue #32 item 2): READERS clients from ADDRESSES
# loopback addresses (127.0.0.10 on) each ask for a 50 MB file and take STEP bytes every EVERY
# seconds, connecting again whenever the server closes them; meanwhile /healthz and a small
# file are fetched once a second on new connections from 127.0.0.1, timed, and the server's
# RSS sampled (bench/slow_readers.py prints a line a second and a summary).
#
#   bench/slow_readers.sh                           # 1000 readers, 1 address, 60 s, defaults
#   ADDRESSES=8 bench/slow_readers.sh               # spread over 8 addresses (each under its cap)
#   QUARRY=/path/to/quarry bench/slow_readers.sh    # a prebuilt binary instead of building one
#   READERS=300 SECONDS_EACH=30 STEP=512 EVERY=5 FILE_MB=50 bench/slow_readers.sh
#   CONFIG='[limits]\nmax_connections = 256' bench/slow_readers.sh   # extra quarry.toml lines
#
# Needs: python3, Linux (loopback aliases 127.0.0.N, /proc). The server runs with the default
# limits unless CONFIG says otherwise, under this shell's open-file limit (raised to 4096 if
# lower, so the default max_connections of 1024 holds).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$repo/bench/lib.sh"
bench_setup slow-readers
readers=${READERS:-1000}
addresses=${ADDRESSES:-1}
seconds=${SECONDS_EACH:-60}
step=${STEP:-512}
every=${EVERY:-5}
file_mb=${FILE_MB:-50}
command -v python3 >/dev/null || die "python3 is missing"
if [[ -n "${QUARRY:-}" ]]; then
    cp "$QUARRY" "$work/quarry"
    quarry="$work/quarry"
    quarry_rev="given binary"
else
    bench_quarry
fi
[[ "$(ulimit -n)" -ge 4096 ]] || ulimit -n 4096

store="$work/store"
mkdir -p "$store/1-linux"
head -c "$((file_mb * 1024 * 1024))" /dev/zero >"$store/1-linux/big.bin"
echo small >"$store/1-linux/small.txt"
printf 'store = "%s"\n%b\n' "$store" "${CONFIG:-}" >"$work/quarry.toml"
"$quarry" serve --config "$work/quarry.toml" --addr 127.0.0.1:0 >"$work/url" 2>"$work/serve.log" &
server=$!
trap 'kill $server 2>/dev/null; bench_cleanup' EXIT
for _ in $(seq 1 100); do [[ -s "$work/url" ]] && break; sleep 0.1; done
url=$(head -1 "$work/url")
port=${url##*:}
port=${port%/}

echo "date: $(date -u +%FT%TZ)"
echo "quarry: $("$quarry" --version) (git $quarry_rev)"
bench_host
echo "file: ${file_mb} MB; readers: $readers from $addresses address(es), $step bytes every $every s, for $seconds s"
echo "config: $(tr '\n' ' ' <"$work/quarry.toml" | sed "s|$store|STORE|")"
echo
python3 "$repo/bench/slow_readers.py" 127.0.0.1 "$port" "$server" 1-linux/big.bin 1-linux/small.txt \
    --readers "$readers" --addresses "$addresses" --seconds "$seconds" --step "$step" --every "$every"
