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
#   - four ways of naming a new file (rename across directories, rename in the same
#     directory, O_TMPFILE + linkat, plain create), files/s and CPU each
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

# How each object gets its name (issue #17 item 2): a named temporary file in tmp/ renamed
# across directories (the local store's single puts), one in the destination directory renamed
# there, an unnamed O_TMPFILE file linked into place (Linux; the store's batched puts), and a
# plain create under the final name (no atomicity: the floor). Each into a fresh directory,
# one after another, files/s and CPU seconds.
methods() {
    python3 - "$1" "$n" "$2" <<'EOF'
import ctypes, os, sys, time
base, n, method = sys.argv[1], int(sys.argv[2]), sys.argv[3]
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, AT_SYMLINK_FOLLOW = -100, 0x400
os.makedirs(f"{base}/tmp", exist_ok=True)
out = f"{base}/out"
os.makedirs(out, exist_ok=True)
body = b"x" * 2048
start, cpu = time.perf_counter(), os.times()
for i in range(n):
    final = f"{out}/{i}.metadata"
    if method == "tmpfile":
        fd = os.open(out, os.O_WRONLY | os.O_TMPFILE, 0o644)
        os.write(fd, body)
        if libc.linkat(AT_FDCWD, f"/proc/self/fd/{fd}".encode(), AT_FDCWD, final.encode(), AT_SYMLINK_FOLLOW):
            raise OSError(ctypes.get_errno(), "linkat")
        os.close(fd)
        continue
    tmp = {"cross-dir rename": f"{base}/tmp/{i}", "same-dir rename": f"{out}/.tmp-{i}"}.get(method, final)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, body)
    os.close(fd)
    if tmp != final:
        os.rename(tmp, final)
took, used = time.perf_counter() - start, os.times()
print(f"{method:>16}: {n / took:6.0f} files/s, CPU user {used.user - cpu.user:.2f} s + sys {used.system - cpu.system:.2f} s")
EOF
}
# Nothing is deleted before the end: on a disk mounted with `discard`, files deleted just
# before slow down the creates that follow (system CPU up to 10x).
for round in 1 2; do
    for method in "cross-dir rename" "same-dir rename" tmpfile "create in place"; do
        methods "$dir/m.$round.${method// /-}" "$method"
    done
done

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
rm -rf "$dir/one" "$dir/two-a" "$dir/two-b" "$dir"/m.*
