#!/usr/bin/env bash
# `quarry artifacts push` and `fetch --bootstrap` through a local staging directory against
# `tar | zstd -T0` and `zstd -d | tar -x` on the same artifact set, with TheRock's
# `artifact_manager.py` beside them when AM_PYTHON and AM_TOOLS point at a runnable copy
# (AM_TOOLS: a directory holding TheRock's build_tools/; AM_PYTHON: a Python >= 3.11.4 with
# pyzstd installed, e.g. `python3 -m venv v && v/bin/pip install 'pyzstd>=0.16'`).
#
#   bench/artifacts.sh                 # 2 GiB in 4 artifacts, best of 2
#   SIZE_MB=128 bench/artifacts.sh     # a quick trial
#
# Input: SIZE_MB MiB spread over four artifacts (`{a,b,c,d}-lib_lib_generic`, one root each),
# files of 1-16 MiB, half seeded-random (incompressible), half token soup zstd -3 shrinks
# about 4x, plus a .so symlink chain per artifact. zstd level 3 everywhere (Quarry's and
# TheRock's default). Quarry archives artifacts one at a time, each with all cores
# (--compress-concurrency 1, zstd workers = CPUs); the baseline runs `zstd -T0` per
# artifact, one after another. Both write the same members (manifest first, then the root).
# Checks: every fetched tree equals its source (diff -r, symlinks compared as links).
# Ratios are baseline / Quarry (wall): > 1 means Quarry is faster.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$repo/bench/lib.sh"
bench_setup artifacts
size_mb=${SIZE_MB:-2048}
rounds=${ROUNDS:-2}
for tool in cargo python3 zstd tar diff sha256sum; do command -v "$tool" >/dev/null || die "$tool is missing"; done
bench_quarry

build="$work/build"
log "generating $size_mb MiB in 4 artifacts under $build/artifacts"
python3 - "$build/artifacts" "$size_mb" <<'PY'
import os, random, sys
art, size_mb = sys.argv[1], int(sys.argv[2])
r = random.Random(7)
MiB = 1 << 20
ops = [b"v_add_f32", b"s_load_dwordx4", b"global_store_dwordx2", b"_ZN6rocblas6kernel", b"ds_read_b128"]
words = [r.choice(ops) + b" " + str(r.randrange(100000)).encode() + b"\n" if i % 2 else r.randbytes(r.randrange(4, 24))
         for i in range(4096)]
def soup(n):
    out = bytearray()
    while len(out) < n:
        out += b"".join(r.choices(words, k=65536))
    return bytes(out[:n])
for a in "abcd":
    root = f"libs/{a}/stage"
    base = os.path.join(art, f"{a}-lib_lib_generic")
    lib = os.path.join(base, root, "lib")
    os.makedirs(lib)
    open(os.path.join(base, "artifact_manifest.txt"), "w").write(root + "\n")
    left, i = size_mb * MiB // 4, 0
    while left > 0:
        n = min(left, int(MiB * 16 ** r.random()))
        data = r.randbytes(n) if i % 2 else soup(n)
        open(os.path.join(lib, f"part{i:04d}.bin"), "wb").write(data)
        left -= n
        i += 1
    open(os.path.join(lib, f"lib{a}.so.1.0"), "wb").write(r.randbytes(4096))
    os.symlink(f"lib{a}.so.1.0", os.path.join(lib, f"lib{a}.so.1"))
    os.symlink(f"lib{a}.so.1", os.path.join(lib, f"lib{a}.so"))
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
[artifacts.a-lib]
artifact_group = "libs"
[artifacts.b-lib]
artifact_group = "libs"
[artifacts.c-lib]
artifact_group = "libs"
[artifacts.d-lib]
artifact_group = "libs"
[artifacts.consumer]
artifact_group = "consumer"
TOML
bytes=$(du -sb --apparent-size "$build/artifacts" | cut -f1)
sync
now() { date +%s.%N; }
best() { printf '%s\n' "$@" | sort -g | head -1; }
declare -a q_push q_fetch b_push b_fetch a_push a_fetch
am=""
if [[ -n "${AM_PYTHON:-}" && -n "${AM_TOOLS:-}" ]]; then
    am="$AM_PYTHON $AM_TOOLS/build_tools/artifact_manager.py"
    log "TheRock's artifact_manager.py from $AM_TOOLS runs beside us"
fi
for round in $(seq "$rounds"); do
    rm -rf "$work/staging" "$work/out" "$build/.upload_cache"
    t0=$(now)
    "$quarry" artifacts push --topology "$work/BUILD_TOPOLOGY.toml" --stage libs --build-dir "$build" \
        --local-staging-dir "$work/staging" --run-id 1 --platform linux > /dev/null
    t1=$(now)
    "$quarry" artifacts fetch --topology "$work/BUILD_TOPOLOGY.toml" --stage consumer --bootstrap \
        --output-dir "$work/out" --local-staging-dir "$work/staging" --run-id 1 --platform linux > /dev/null
    t2=$(now)
    q_push+=("$(echo "$t1 - $t0" | bc)"); q_fetch+=("$(echo "$t2 - $t1" | bc)")

    rm -rf "$work/base" "$work/base-out"; mkdir -p "$work/base" "$work/base-out"
    t0=$(now)
    for dir in "$build"/artifacts/*/; do
        name=$(basename "$dir")
        root=$(head -1 "$dir/artifact_manifest.txt")
        tar -C "$dir" -cf - artifact_manifest.txt "$root" | zstd -T0 -3 -q -o "$work/base/$name.tar.zst"
        sha256sum "$work/base/$name.tar.zst" | cut -d' ' -f1 > "$work/base/$name.tar.zst.sha256sum"
    done
    t1=$(now)
    for archive in "$work"/base/*.tar.zst; do
        sha256sum "$archive" | cut -d' ' -f1 | cmp -s - "$archive.sha256sum" || die "baseline sha256"
        zstd -d -T0 -q -c "$archive" | tar -x -C "$work/base-out"
    done
    t2=$(now)
    b_push+=("$(echo "$t1 - $t0" | bc)"); b_fetch+=("$(echo "$t2 - $t1" | bc)")
    log "round $round: quarry push ${q_push[-1]} s fetch ${q_fetch[-1]} s; tar+zstd ${b_push[-1]} s, unzstd+tar ${b_fetch[-1]} s"
    if [[ -n "$am" ]]; then
        rm -rf "$work/am-staging" "$work/am-out" "$build/.upload_cache"
        t0=$(now)
        $am push --topology "$work/BUILD_TOPOLOGY.toml" --stage libs --build-dir "$build" \
            --local-staging-dir "$work/am-staging" --run-id 2 --platform linux > "$work/am-push.log" 2>&1 \
            || die "artifact_manager.py push: $(tail -3 "$work/am-push.log")"
        t1=$(now)
        $am fetch --topology "$work/BUILD_TOPOLOGY.toml" --stage consumer --bootstrap --output-dir "$work/am-out" \
            --local-staging-dir "$work/am-staging" --run-id 2 --platform linux > "$work/am-fetch.log" 2>&1 \
            || die "artifact_manager.py fetch: $(tail -3 "$work/am-fetch.log")"
        t2=$(now)
        a_push+=("$(echo "$t1 - $t0" | bc)"); a_fetch+=("$(echo "$t2 - $t1" | bc)")
        log "round $round: artifact_manager.py push ${a_push[-1]} s fetch ${a_fetch[-1]} s"
    fi
done
for a in a b c d; do
    diff -r --no-dereference "$build/artifacts/$a-lib_lib_generic/libs/$a/stage" "$work/out/libs/$a/stage" \
        || die "quarry's fetched tree differs for $a"
    diff -r --no-dereference "$build/artifacts/$a-lib_lib_generic/libs/$a/stage" "$work/base-out/libs/$a/stage" \
        || die "the baseline's tree differs for $a"
done
qa=$(du -cb "$work"/staging/1-linux/*.tar.zst | tail -1 | cut -f1)
ba=$(du -cb "$work"/base/*.tar.zst | tail -1 | cut -f1)
qp=$(best "${q_push[@]}"); qf=$(best "${q_fetch[@]}"); bp=$(best "${b_push[@]}"); bf=$(best "${b_fetch[@]}")
echo "date: $(date -u +%FT%TZ)"
echo "quarry: $("$quarry" --version) (git $quarry_rev)"
echo "zstd: $(zstd --version)"
bench_host
echo "input: $((bytes / 1048576)) MiB in 4 artifacts; archives: quarry $((qa / 1048576)) MiB, tar+zstd $((ba / 1048576)) MiB"
echo
echo "| step | tar + zstd -T0 (s) | quarry (s) | MB/s quarry | ratio |"
echo "| --- | ---: | ---: | ---: | ---: |"
printf '| push (archive + sha256, local staging) | %.2f | %.2f | %.0f | **%.2f** |\n' "$bp" "$qp" "$(echo "$bytes / 1000000 / $qp" | bc -l)" "$(echo "$bp / $qp" | bc -l)"
printf '| fetch --bootstrap (verify + extract) | %.2f | %.2f | %.0f | **%.2f** |\n' "$bf" "$qf" "$(echo "$bytes / 1000000 / $qf" | bc -l)" "$(echo "$bf / $qf" | bc -l)"
if [[ -n "$am" ]]; then
    for a in a b c d; do
        diff -r --no-dereference "$build/artifacts/$a-lib_lib_generic/libs/$a/stage" "$work/am-out/libs/$a/stage" \
            || die "artifact_manager.py's fetched tree differs for $a"
    done
    ap=$(best "${a_push[@]}"); af=$(best "${a_fetch[@]}")
    echo
    echo "| step | artifact_manager.py (s) | quarry (s) | ratio |"
    echo "| --- | ---: | ---: | ---: |"
    printf '| push | %.2f | %.2f | **%.2f** |\n' "$ap" "$qp" "$(echo "$ap / $qp" | bc -l)"
    printf '| fetch --bootstrap | %.2f | %.2f | **%.2f** |\n' "$af" "$qf" "$(echo "$af / $qf" | bc -l)"
fi
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
