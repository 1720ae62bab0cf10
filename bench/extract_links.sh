#!/usr/bin/env bash
# Extraction speed of a real-sized artifact with symlinks: `quarry artifacts fetch --bootstrap`
# (verify + unpack + make the links) of one 1 GiB artifact, thousands of files, a few thousand
# symlinks (.so chains, directory links, links through directory links), with this tree's
# quarry and another build (BASE_QUARRY, e.g. the commit before links were judged by where
# they resolve), alternating, best of ROUNDS each.
#
#   BASE_QUARRY=/path/to/old/quarry bench/extract_links.sh
#   SIZE_MB=128 ROUNDS=2 BASE_QUARRY=... bench/extract_links.sh    # a quick trial
#
# Input: SIZE_MB MiB in FILES files under 64 directories (half seeded-random, half token soup
# zstd -3 shrinks about 4x), per directory a `.so` chain of 3 links per library for 1 in 4
# files, a directory link and links through it, archived once by this tree's quarry (zstd -3).
# Checks: both fetched trees equal the source (diff -r, links compared as links).
# Ratio: base / this (wall); >= 0.95 means at most 5% slower.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$repo/bench/lib.sh"
bench_setup extract_links
size_mb=${SIZE_MB:-1024}
files=${FILES:-4096}
rounds=${ROUNDS:-3}
[[ -n "${BASE_QUARRY:-}" && -x "${BASE_QUARRY}" ]] || die "BASE_QUARRY must name a quarry binary to compare with"
for tool in cargo python3 diff; do command -v "$tool" >/dev/null || die "$tool is missing"; done
bench_quarry
cp "$BASE_QUARRY" "$work/base-quarry"
base="$work/base-quarry"

build="$work/build"
log "generating $size_mb MiB in $files files under $build/artifacts/big-lib_lib_generic"
python3 - "$build/artifacts" "$size_mb" "$files" <<'PY'
import os, random, sys
art, size_mb, files = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = random.Random(11)
MiB = 1 << 20
ops = [b"v_add_f32", b"s_load_dwordx4", b"global_store_dwordx2", b"_ZN6rocblas6kernel", b"ds_read_b128"]
words = [r.choice(ops) + b" " + str(r.randrange(100000)).encode() + b"\n" if i % 2 else r.randbytes(r.randrange(4, 24))
         for i in range(4096)]
def soup(n):
    out = bytearray()
    while len(out) < n:
        out += b"".join(r.choices(words, k=max(1, n // 8)))
    return bytes(out[:n])
root = "libs/big/stage"
base = os.path.join(art, "big-lib_lib_generic")
os.makedirs(os.path.join(base, root))
open(os.path.join(base, "artifact_manifest.txt"), "w").write(root + "\n")
stage = os.path.join(base, root)
per = size_mb * MiB // files
links = 0
for d in range(64):
    lib = os.path.join(stage, f"lib{d:02d}")
    os.makedirs(os.path.join(lib, "llvm/bin"))
    os.symlink("llvm", os.path.join(lib, "llvm-current"))
    os.makedirs(os.path.join(stage, f"bin{d:02d}"))
    links += 1
    for i in range(files // 64):
        n = max(1, int(per * (0.5 + r.random())))
        data = r.randbytes(n) if i % 2 else soup(n)
        if i % 8 == 0:
            open(os.path.join(lib, f"llvm/bin/tool{i}"), "wb").write(data)
            os.symlink(f"../lib{d:02d}/llvm-current/bin/tool{i}", os.path.join(stage, f"bin{d:02d}/tool{i}"))
            links += 1
            continue
        name = f"libk{i}.so"
        open(os.path.join(lib, f"{name}.1.{i}"), "wb").write(data)
        if i % 4 == 1:
            os.symlink(f"{name}.1.{i}", os.path.join(lib, f"{name}.1"))
            os.symlink(f"{name}.1", os.path.join(lib, name))
            os.symlink(f"../lib{d:02d}/{name}", os.path.join(stage, f"bin{d:02d}/{name}"))
            links += 3
print(links, file=sys.stderr)
PY
cat > "$work/BUILD_TOPOLOGY.toml" <<'TOML'
[metadata]
version = "2.0"
[build_stages.libs]
artifact_groups = ["libs"]
[build_stages.consumer]
artifact_groups = ["consumer"]
[artifact_groups.libs]
[artifact_groups.consumer]
artifact_group_deps = ["libs"]
[artifacts.big-lib]
artifact_group = "libs"
[artifacts.consumer]
artifact_group = "consumer"
TOML
src="$build/artifacts/big-lib_lib_generic/libs/big/stage"
bytes=$(du -sb --apparent-size "$src" | cut -f1)
nfiles=$(find "$src" -type f | wc -l)
nlinks=$(find "$src" -type l | wc -l)
log "archiving"
"$quarry" artifacts push --topology "$work/BUILD_TOPOLOGY.toml" --stage libs --build-dir "$build" \
    --local-staging-dir "$work/staging" --run-id 1 --platform linux > /dev/null
archive=$(du -cb "$work"/staging/1-linux/*.tar.zst | tail -1 | cut -f1)
sync
now() { date +%s.%N; }
best() { printf '%s\n' "$@" | sort -g | head -1; }
fetch() { # binary, output dir
    rm -rf "$2"
    local t0 t1
    t0=$(now)
    "$1" artifacts fetch --topology "$work/BUILD_TOPOLOGY.toml" --stage consumer --bootstrap --output-dir "$2" \
        --local-staging-dir "$work/staging" --run-id 1 --platform linux --extract-concurrency 1 > /dev/null
    t1=$(now)
    echo "$t1 - $t0" | bc
}
declare -a t_base t_new
for round in $(seq "$rounds"); do
    t_base+=("$(fetch "$base" "$work/out-base")")
    t_new+=("$(fetch "$quarry" "$work/out-new")")
    log "round $round: base ${t_base[-1]} s, this ${t_new[-1]} s"
done
diff -r --no-dereference "$src" "$work/out-base/libs/big/stage" || die "the base's fetched tree differs"
diff -r --no-dereference "$src" "$work/out-new/libs/big/stage" || die "this tree's fetched tree differs"
tb=$(best "${t_base[@]}"); tn=$(best "${t_new[@]}")
echo "date: $(date -u +%FT%TZ)"
echo "quarry: $("$quarry" --version) (git $quarry_rev); base: $("$base" --version)"
bench_host
echo "input: $((bytes / 1048576)) MiB, $nfiles files, $nlinks symlinks in one artifact; archive $((archive / 1048576)) MiB (zstd -3)"
echo
echo "| fetch --bootstrap, best of $rounds | base (s) | this (s) | MB/s this | ratio base/this |"
echo "| --- | ---: | ---: | ---: | ---: |"
printf '| 1 artifact, verify + extract | %.2f | %.2f | %.0f | **%.3f** |\n' "$tb" "$tn" "$(echo "$bytes / 1000000 / $tn" | bc -l)" "$(echo "$tb / $tn" | bc -l)"
echo "all rounds: base ${t_base[*]}; this ${t_new[*]}"
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
