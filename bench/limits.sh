#!/usr/bin/env bash
# What this machine can do at most, for `quarry index` from scratch (issue #17 item 2):
#
#   bench/limits.sh [DIR] [WHEELS]
#
#   DIR     a directory on the filesystem the store lives on (default: a new mktemp -d)
#   WHEELS  a directory of wheels to parse (default: none; bench/gen_wheels.py --out X writes
#           X/wheels)
#
# Prints, one line each:
#   - file create+write+close+rename per second into DIR (N small files, one thread), the
#     floor for writing N outputs (the local store writes a temporary file and renames it)
#   - the same from 2 processes at once
#   - SHA-256 MB/s per core (`openssl speed`, SHA-NI where the CPU has it, as the sha2 crate)
#   - zip central directory + METADATA reads per second per core over WHEELS (Python's
#     zipfile: an upper bound on the cost, Rust's parser does less work)
set -euo pipefail

dir="${1:-$(mktemp -d "${TMPDIR:-/tmp}/quarry-limits.XXXXXX")}"
wheels="${2:-}"
n="${FILES:-10000}"
mkdir -p "$dir"

creates() {
    python3 - "$1" "$n" <<'EOF'
import os, sys, time
base, n = sys.argv[1], int(sys.argv[2])
os.makedirs(f"{base}/tmp", exist_ok=True)
os.makedirs(f"{base}/out", exist_ok=True)
body = b"x" * 2048
start = time.perf_counter()
for i in range(n):
    tmp = f"{base}/tmp/{i}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, body)
    os.close(fd)
    os.rename(tmp, f"{base}/out/{i}.metadata")
print(f"{n / (time.perf_counter() - start):.0f}")
EOF
}

echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
one="$(creates "$dir/one")"
echo "create+write+close+rename, 1 process: $one files/s"
a="$(mktemp)"; b="$(mktemp)"
creates "$dir/two-a" >"$a" & creates "$dir/two-b" >"$b" & wait
echo "create+write+close+rename, 2 processes: $(( $(cat "$a") + $(cat "$b") )) files/s in total"
rm -f "$a" "$b"
rm -rf "$dir/one" "$dir/two-a" "$dir/two-b"

sha="$(openssl speed -seconds 2 -bytes 16384 sha256 2>/dev/null | awk '/^sha256/ {print $2}')"
echo "sha256 (16 KiB blocks), 1 core: ${sha} (1000s of bytes/s, openssl)"

if [[ -n "$wheels" ]]; then
    python3 - "$wheels" <<'EOF'
import os, sys, time, zipfile
files = sorted(os.path.join(sys.argv[1], f) for f in os.listdir(sys.argv[1]) if f.endswith(".whl"))
start = time.perf_counter()
for path in files:
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        z.read(name)
took = time.perf_counter() - start
print(f"zip central directory + METADATA (Python zipfile), 1 core: {len(files) / took:.0f} wheels/s over {len(files)}")
EOF
fi
