#!/usr/bin/env bash
# `quarry artifacts push` and `fetch --bootstrap` through a local staging directory against
# `tar | zstd -T0` and `zstd -d | tar -x` on the same artifact set, with TheRock's
# `artifact_manager.py` beside them when AM_PYTHON and AM_TOOLS point at a runnable copy
# (AM_TOOLS: a directory holding TheRock's build_tools/; AM_PYTHON: a Python >= 3.11.4 with
# pyzstd installed, e.g. `python3 -m venv v && v/bin/pip install 'pyzstd>=0.16'`).
#
#   bench/artifacts.sh                 # 2 GiB in 4 artifacts, best of 2
#   SHAPE=run bench/artifacts.sh       # a run's shape: 1 GiB in 36 archives, thousands of files
#   SIZE_MB=128 bench/artifacts.sh     # a quick trial
#
# Input (SHAPE=large, the default): SIZE_MB MiB spread over four artifacts
# (`{a,b,c,d}-lib_lib_generic`, one root each), files of 1-16 MiB, half seeded-random
# (incompressible), half token soup zstd -3 shrinks about 4x, plus a .so symlink chain per
# artifact. SHAPE=run (SIZE_MB defaults to 1024): twelve artifacts in three components each
# (`{x}-lib_{lib,dev,test}_generic`, 36 archives sharing each artifact's root): headers and
# cmake files of 1-16 KiB, libraries of 64 KiB-8 MiB with their .so chains, test programs,
# the same random/soup mix. zstd level 3 everywhere (Quarry's and
# TheRock's default). Quarry archives one artifact per core at once (its default
# --compress-concurrency), uploading each as soon as it is written; the baseline runs
# `zstd -T0` per artifact, one after another. Both write the same members (manifest first, then the root).
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
shape=${SHAPE:-large}
case "$shape" in
    large) letters="a b c d" ;;
    run) letters="a b c d e f g h i j k l"; size_mb=${SIZE_MB:-1024} ;;
    *) die "SHAPE is large or run, not $shape" ;;
esac
log "generating $size_mb MiB in the $shape shape under $build/artifacts"
python3 - "$build/artifacts" "$size_mb" "$shape" <<'PY'
import os, random, sys
art, size_mb, shape = sys.argv[1], int(sys.argv[2]), sys.argv[3]
r = random.Random(7)
MiB = 1 << 20
ops = [b"v_add_f32", b"s_load_dwordx4", b"global_store_dwordx2", b"_ZN6rocblas6kernel", b"ds_read_b128"]
words = [r.choice(ops) + b" " + str(r.randrange(100000)).encode() + b"\n" if i % 2 else r.randbytes(r.randrange(4, 24))
         for i in range(4096)]
def soup(n):
    out = bytearray()
    while len(out) < n:
        out += b"".join(r.choices(words, k=max(16, min(65536, n // 8))))
    return bytes(out[:n])
def artifact(name, component):
    root = f"libs/{name}/stage"
    base = os.path.join(art, f"{name}-lib_{component}_generic")
    os.makedirs(os.path.join(base, root), exist_ok=True)
    open(os.path.join(base, "artifact_manifest.txt"), "w").write(root + "\n")
    return os.path.join(base, root)
def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, "wb").write(data)
if shape == "large":
    for a in "abcd":
        lib = os.path.join(artifact(a, "lib"), "lib")
        left, i = size_mb * MiB // 4, 0
        while left > 0:
            n = min(left, int(MiB * 16 ** r.random()))
            write(os.path.join(lib, f"part{i:04d}.bin"), r.randbytes(n) if i % 2 else soup(n))
            left -= n
            i += 1
        write(os.path.join(lib, f"lib{a}.so.1.0"), r.randbytes(4096))
        os.symlink(f"lib{a}.so.1.0", os.path.join(lib, f"lib{a}.so.1"))
        os.symlink(f"lib{a}.so.1", os.path.join(lib, f"lib{a}.so"))
else:
    names = "abcdefghijkl"
    per = size_mb * MiB // len(names)
    for a in names:
        # dev: ~3 % of the bytes in small headers and cmake files
        dev, left, i = artifact(a, "dev"), per * 3 // 100, 0
        while left > 0:
            n = min(left, int(1024 * 16 ** r.random()))
            write(os.path.join(dev, "include", a, f"d{i % 7}", f"h{i:05d}.h"), soup(n))
            left -= n
            i += 1
        write(os.path.join(dev, "lib/cmake", a, f"{a}-config.cmake"), soup(2048))
        # test: ~17 % in test programs of 16 KiB-1 MiB
        test, left, i = artifact(a, "test"), per * 17 // 100, 0
        while left > 0:
            n = min(left, int(16384 * 64 ** r.random()))
            write(os.path.join(test, "bin", f"{a}-test{i:04d}"), r.randbytes(n) if i % 2 else soup(n))
            os.chmod(os.path.join(test, "bin", f"{a}-test{i:04d}"), 0o755)
            left -= n
            i += 1
        # lib: the rest in libraries of 64 KiB-8 MiB, each with its .so chain
        lib, left, i = artifact(a, "lib"), per * 80 // 100, 0
        while left > 0:
            n = min(left, int(65536 * 128 ** r.random()))
            so = f"lib{a}{i:03d}.so"
            write(os.path.join(lib, "lib", so + ".1.0"), r.randbytes(n) if i % 2 else soup(n))
            os.symlink(so + ".1.0", os.path.join(lib, "lib", so + ".1"))
            os.symlink(so + ".1", os.path.join(lib, "lib", so))
            left -= n
            i += 1
PY
{
    printf '[metadata]\nversion = "2.0"\n[build_stages.libs]\nartifact_groups = ["libs"]\n'
    printf '[build_stages.consumer]\nartifact_groups = ["consumer"]\n[artifact_groups.libs]\n'
    printf '[artifact_groups.consumer]\nartifact_group_deps = ["libs"]\n'
    for a in $letters; do printf '[artifacts.%s-lib]\nartifact_group = "libs"\n' "$a"; done
    printf '[artifacts.consumer]\nartifact_group = "consumer"\n'
} > "$work/BUILD_TOPOLOGY.toml"
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
# What each artifact's root should hold: its components merged (hard links, no copy).
expected="$work/expected"
rm -rf "$expected"
for dir in "$build"/artifacts/*/; do
    name=$(basename "$dir"); a=${name%%-lib_*}
    mkdir -p "$expected/$a"
    cp -al "$dir/libs/$a/stage/." "$expected/$a/"
done
for a in $letters; do
    diff -r --no-dereference "$expected/$a" "$work/out/libs/$a/stage" || die "quarry's fetched tree differs for $a"
    diff -r --no-dereference "$expected/$a" "$work/base-out/libs/$a/stage" || die "the baseline's tree differs for $a"
done
qa=$(du -cb "$work"/staging/1-linux/*.tar.zst | tail -1 | cut -f1)
ba=$(du -cb "$work"/base/*.tar.zst | tail -1 | cut -f1)
qp=$(best "${q_push[@]}"); qf=$(best "${q_fetch[@]}"); bp=$(best "${b_push[@]}"); bf=$(best "${b_fetch[@]}")
echo "date: $(date -u +%FT%TZ)"
echo "quarry: $("$quarry" --version) (git $quarry_rev)"
echo "zstd: $(zstd --version)"
bench_host
echo "input: $((bytes / 1048576)) MiB, $(find "$build/artifacts" -type f | wc -l) files in $(ls "$build/artifacts" | wc -l) archives ($shape shape); archives: quarry $((qa / 1048576)) MiB, tar+zstd $((ba / 1048576)) MiB"
echo
echo "| step | tar + zstd -T0 (s) | quarry (s) | MB/s quarry | ratio |"
echo "| --- | ---: | ---: | ---: | ---: |"
printf '| push (archive + sha256, local staging) | %.2f | %.2f | %.0f | **%.2f** |\n' "$bp" "$qp" "$(echo "$bytes / 1000000 / $qp" | bc -l)" "$(echo "$bp / $qp" | bc -l)"
printf '| fetch --bootstrap (verify + extract) | %.2f | %.2f | %.0f | **%.2f** |\n' "$bf" "$qf" "$(echo "$bytes / 1000000 / $qf" | bc -l)" "$(echo "$bf / $qf" | bc -l)"
if [[ -n "$am" ]]; then
    for a in $letters; do
        diff -r --no-dereference "$expected/$a" "$work/am-out/libs/$a/stage" \
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
