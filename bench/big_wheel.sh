#!/usr/bin/env bash
# How long does indexing a 4 GiB wheel take? With its sha256 recorded at upload (the server's
# path: METADATA comes from ranged reads of the central directory), and without (the indexer
# must stream the whole file once to hash it). Also times the upload itself.
#
#   bench/big_wheel.sh [SIZE_MIB]      (default 4200: past 4 GiB, so the wheel needs zip64)
set -euo pipefail
cd "$(dirname "$0")/.."
size_mib=${1:-4200}
cargo build --release -p quarry --locked >&2
quarry=$PWD/target/release/quarry
work=$(mktemp -d /tmp/quarry-big-wheel.XXXXXX)
server=
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

echo "==> writing a ${size_mib} MiB wheel" >&2
python3 - "$work" "$size_mib" <<'PY'
import sys, zipfile
out, mib = sys.argv[1], int(sys.argv[2])
path = f"{out}/big_wheel-1.0-py3-none-any.whl"
with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
    with z.open(zipfile.ZipInfo("big_wheel/data.bin", (1980, 1, 1, 0, 0, 0)), "w", force_zip64=True) as f:
        block = bytes(1 << 20)
        for _ in range(mib):
            f.write(block)
    z.writestr("big_wheel-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: big-wheel\nVersion: 1.0\n")
    z.writestr("big_wheel-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    z.writestr("big_wheel-1.0.dist-info/RECORD", "")
print(path)
PY
wheel=$work/big_wheel-1.0-py3-none-any.whl
bytes=$(stat -c %s "$wheel")

"$quarry" serve --store "$work/store" --addr 127.0.0.1:0 --token-file "$work/token" >"$work/url" 2>"$work/serve.log" &
server=$!
for _ in $(seq 1 100); do [ -s "$work/url" ] && break; sleep 0.1; done
url=$(head -n 1 "$work/url")
start=$(date +%s%N)
"$quarry" upload "$wheel" --to "${url}big-linux/python/" --token-file "$work/token" >/dev/null
upload_s=$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')
kill "$server"; wait "$server" 2>/dev/null || true; server=

root=$work/store/big-linux/python
time_index() {
  rm -f "$root/.quarry-index.json"
  local t0 t1
  t0=$(date +%s%N)
  "$quarry" index "$work/store" >/dev/null 2>"$work/index.log"
  t1=$(date +%s%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'
}
known_s=$(time_index)
known_ops=$(grep -o 'store operations: .*)' "$work/index.log")
rm -f "$work/store/.quarry/meta/big-linux/python/big_wheel-1.0-py3-none-any.whl.json"
unknown_s=$(time_index)
unknown_ops=$(grep -o 'store operations: .*)' "$work/index.log")

printf '| wheel size | upload (quarry upload → serve, incl. validation + reindex) | index, sha256 known | index, sha256 unknown (streams the file) |\n'
printf '|---|---|---|---|\n'
printf '| %s bytes | %.2f s (%.0f MiB/s) | %.3f s — %s | %.2f s — %s |\n' "$bytes" "$upload_s" \
  "$(awk -v b="$bytes" -v s="$upload_s" 'BEGIN { print b / 1048576 / s }')" "$known_s" "$known_ops" "$unknown_s" "$unknown_ops"
