#!/usr/bin/env bash
# `quarry package deb|rpm` against `dpkg-deb -b` and `rpmbuild -bb` on a 1 GiB artifact tree,
# at the same codec and level, with single-core zstd as the limit; then once at TheRock's
# levels (debs `-Zxz`, rpms `w9.zstdio`); and with BIG=1, peak RSS and throughput at 8 GiB
# against `tar | zstd -T0`.
#
#   bench/package.sh                 # 1 GiB tree, best of 2 (+ one round at TheRock's levels)
#   SIZE_MB=64 bench/package.sh      # a quick trial
#   BIG=1 SIZE_MB=8192 RUNS=1 bench/package.sh   # 8 GiB: quarry deb, rpm, tar | zstd -T0
#
# The input is a synthetic TheRock artifacts directory: fft_lib_generic/ (manifest line
# math-libs/rocFFT/stage) holding SIZE_MB MiB under lib/ (a few hundred files of 1-16 MiB,
# log-uniform, plus 64 small ones; about half the bytes seeded-random and incompressible, half
# token soup of symbol names and short binary words that zstd -3 shrinks about 4x; a .so
# symlink chain) and fft_lib_gfx942/ with one tiny lib/rocfft/gfx942.kpack. `--pkg-names
# amdrocm-fft --enable-kpack --target gfx942` puts all of the big tree into
# amdrocm-fft-host7.1 under /opt/rocm/core-7.1/. Generated once per run (python3, seed 42)
# under ${TMPDIR:-/tmp}, removed at exit.
#
# Compression: zstd level 3 everywhere (LEVEL=N to change): fast enough that 1 GiB on 2 cores
# stays quick, and the level where the tools' overheads (reading, hashing, archiving) show
# rather than drown in compressor time. What is timed (wall seconds, `date +%s.%N` around the
# command; CPU and peak RSS from /usr/bin/time, %M being the largest single process of the
# tree, not a sum):
#
#   limit    zstd -3 --single-thread -c tree.tar > /dev/null   (one core, no I/O thread)
#            zstd -3 -T1 / -T2 over the same tar, for reference  (tar made once, page-cached)
#   deb      quarry package deb ... --deb-compression zstd --compression-level 3
#              (the whole command: the 1 GiB host package plus the tiny gfx942 and meta packages)
#            dpkg-deb --root-owner-group -Zzstd -z3 -b ROOT out.deb      (and with --threads-max=1)
#              ROOT = the same tree hardlinked (cp -al) as opt/rocm/core-7.1/ plus DEBIAN/
#              (control, md5sums) and usr/share/{doc,lintian}/ (copyright, changelog.Debian.gz,
#              overrides) taken from Quarry's own host .deb, so both debs hold the same
#              members. dpkg-deb does not compute md5sums (dh_md5sums does, before it), Quarry
#              does while it streams; so `md5sum` over the tree is timed too and the ratio is
#              also given against md5sum + dpkg-deb. By default dpkg-deb runs tar, the zstd
#              compressor (a child with libzstd workers = --threads-max, default all CPUs) and
#              the ar writer as separate processes, so it overlaps reading and compressing even
#              with --threads-max=1 (the second dpkg-deb row: one compressor thread, like Quarry).
#              Quarry builds each package on one thread (packages in parallel, but here one
#              package holds all the bytes) and fsyncs its outputs; dpkg-deb fsyncs its output,
#              rpmbuild does not.
#   rpm      quarry package rpm ... --compression-level 3
#              (the rpm crate, 0.30: files are streamed from disk, but the compressed payload is
#              built in memory, so expect peak RSS of about the .rpm's size; the uncompressed
#              cpio stream is hashed with SHA-256, SHA-512 and SHA3-256 on its way to zstd)
#            rpmbuild -bb SPEC: _binary_payload w3.zstdio (single-threaded zstd, like Quarry),
#              __os_install_post, debug_package and build-id links off, AutoReqProv: no
#              (Quarry generates no dependencies either); %install hardlinks the staged tree
#              with cp -al (its own time is logged from inside %install and reported).
#
# Checks (a broken run cannot look fast): Quarry's summary lists the host package and no
# failure; Quarry's and dpkg-deb's (both runs) debs list the same regular files with the same
# sizes (dpkg-deb --contents, which decompresses the whole payload), all the tree's files among
# them; Quarry's md5sums equal md5sum(1)'s; both rpms list the same regular files and sizes
# (rpm -qp --qf) with the expected count, say PAYLOADCOMPRESSOR zstd at the level asked, pass
# `rpm -K --nosignature` and decompress to the expected number of cpio entries; every deb's
# data member is data.tar.zst.
# Ratios are other tool / Quarry (wall): > 1 means Quarry is faster. MB = 10^6 bytes, and MB/s
# is always the tree's file bytes over the wall time (the tar's headers are not counted).
#
# Environment knobs:
#   SIZE_MB=1024  tree size in MiB
#   RUNS=2        rounds; the best (lowest) wall time of each measurement is reported
#   LEVEL=3       zstd level for every tool
#   SKIP_BUILD=1  use the existing target/release/quarry
#   BENCH_KEEP=1  keep the scratch directory (default: removed at exit)
#   THEROCK=1     also one round at TheRock's levels: XZ_LEVEL=6 (debs), RPM_LEVEL=9 (rpms)
#   BIG=0         1: only Quarry's deb and rpm and `tar | zstd -T0` (no tree.tar, no dpkg/rpmbuild)
#   UNIQUE_MB     distinct bytes on disk (default SIZE_MB); the rest of the tree hard-links them
#                 (every tool still reads and compresses each link as a file of its own)
#
# Prints a markdown summary on stdout (ready for bench/RESULTS.md); progress goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
size_mb="${SIZE_MB:-1024}"
runs="${RUNS:-2}"
level="${LEVEL:-3}"
rpm_level="${RPM_LEVEL:-9}"
xz_level="${XZ_LEVEL:-6}"
therock="${THEROCK:-1}"
big="${BIG:-0}"
unique_mb="${UNIQUE_MB:-$size_mb}"
[[ "$size_mb" =~ ^[1-9][0-9]*$ ]] || { echo "SIZE_MB must be a positive integer" >&2; exit 2; }
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "RUNS must be a positive integer" >&2; exit 2; }
[[ "$unique_mb" =~ ^[1-9][0-9]*$ ]] || { echo "UNIQUE_MB must be a positive integer" >&2; exit 2; }
if ! [[ "$level" =~ ^[1-9][0-9]*$ ]] || ((level > 19)); then echo "LEVEL must be 1-19" >&2; exit 2; fi
epoch=1795000000
export SOURCE_DATE_EPOCH=$epoch

# shellcheck source=bench/lib.sh
source "$here/lib.sh"
bench_setup package

for tool in cargo python3 dpkg-deb rpmbuild rpm rpm2cpio cpio zstd tar md5sum ar /usr/bin/time; do
    command -v "$tool" > /dev/null || die "missing $tool"
done
# Room for the tree, its tar and two debs and two rpms (hardlinked stages cost nothing).
avail_mb=$(df -Pm "$work" | awk 'NR==2 {print $4}')
need_mb=$((unique_mb < size_mb ? unique_mb + size_mb : size_mb * (big == 1 ? 3 : 6)))
((avail_mb > need_mb)) || die "$work has $avail_mb MB free; SIZE_MB=$size_mb needs about $need_mb"

# --- quarry ----------------------------------------------------------------------------------
bench_quarry

# --- the tree --------------------------------------------------------------------------------
art="$work/artifacts"
stage_rel=math-libs/rocFFT/stage
log "generating $size_mb MiB of artifacts in $art"
t0=$(date +%s.%N)
python3 - "$art" "$size_mb" "$stage_rel" "$unique_mb" <<'EOF'
import os, random, sys

art, size_mb, stage_rel, unique_mb = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
r = random.Random(42)
MiB = 1 << 20

def artifact(name):
    base = os.path.join(art, name)
    os.makedirs(os.path.join(base, stage_rel), exist_ok=True)
    with open(os.path.join(base, "artifact_manifest.txt"), "w") as f:
        f.write(stage_rel + "\n")
    return os.path.join(base, stage_rel)

# Token soup: symbol-ish text lines and short binary words, drawn at random (zstd -3: ~4x).
ops = [b"v_add_f32", b"v_fma_f64", b"s_load_dwordx4", b"global_store_dwordx2", b"buffer_load_dword",
       b"s_waitcnt", b"_ZN6rocfft6kernel", b"rocfft_kernel_sbrc_", b"ds_read_b128", b"v_mov_b32"]
words = []
for i in range(4096):
    if i % 2:
        words.append(r.choice(ops) + b" " + str(r.randrange(100000)).encode() + b"\n")
    else:
        words.append(r.randbytes(r.randrange(4, 24)))

def patterned(n):
    out = bytearray()
    while len(out) < n:
        out += b"".join(r.choices(words, k=65536))
    return bytes(out[:n])

stage = artifact("fft_lib_generic")
lib = os.path.join(stage, "lib")
budget = min(size_mb, unique_mb) * MiB
plan = []  # (relative path, size, kind, mode)
for i in range(64):
    n = min(r.randrange(1024, 64 * 1024), budget // 128)
    plan.append((f"rocfft/db/kernels_{i:03d}.json", n, "text", 0o644))
left = budget - sum(p[1] for p in plan)
i = 0
while left > 0:
    n = min(left, int(MiB * 16 ** r.random()))  # log-uniform 1-16 MiB
    name = "librocfft.so.0.1.0" if i == 0 else \
        f"rocfft/{('single', 'double', 'half', 'mixed')[i % 4]}/rocfft_kernels_{i:04d}.co"
    plan.append((name, n, None, 0o755 if i == 0 else 0o644))
    left -= n
    i += 1
random_bytes = text_bytes = 0
for name, n, kind, mode in plan:
    if kind is None:
        kind = "random" if random_bytes < text_bytes else "text"
    data = r.randbytes(n) if kind == "random" else patterned(n)
    if kind == "random":
        random_bytes += n
    else:
        text_bytes += n
    path = os.path.join(lib, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)
# UNIQUE_MB < SIZE_MB: the rest of the tree is hard links to the files above, in turn (each
# a file of its own to every packager: they read and compress it again).
left, copy = (size_mb - min(size_mb, unique_mb)) * MiB, 0
copies = os.path.join(lib, "rocfft/copies")
while left > 0:
    os.makedirs(copies, exist_ok=True)
    name, n, _, _ = plan[64 + copy % (len(plan) - 64)]
    os.link(os.path.join(lib, name), os.path.join(copies, f"{copy:05d}_{os.path.basename(name)}"))
    left -= n
    copy += 1
os.symlink("librocfft.so.0.1.0", os.path.join(lib, "librocfft.so.0"))
os.symlink("librocfft.so.0", os.path.join(lib, "librocfft.so"))

gfx = artifact("fft_lib_gfx942")
os.makedirs(os.path.join(gfx, "lib/rocfft"), exist_ok=True)
with open(os.path.join(gfx, "lib/rocfft/gfx942.kpack"), "wb") as f:
    f.write(b"gfx942 kernels\n")
print(f"{len(plan)} files, {random_bytes} random bytes, {text_bytes} token-soup bytes", file=sys.stderr)
EOF
src="$art/fft_lib_generic/$stage_rel"
n_files=$(find "$src" -type f | wc -l)
n_links=$(find "$src" -type l | wc -l)
in_bytes=$(find "$src" -type f -printf '%s\n' | awk '{ s += $1 } END { printf "%.0f", s }')
log "tree: $n_files files, $n_links symlinks, $in_bytes bytes, generated in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"

# The same tree as dpkg-deb and rpmbuild see it: hardlinks, so no copy of the bytes.
root="$work/deb-root"
mkdir -p "$root/opt/rocm"
cp -al "$src" "$root/opt/rocm/core-7.1"
if ((big == 0)); then
    # The limit's input: a tar of the same files, made once (untimed).
    tar --sort=name --owner=0 --group=0 --numeric-owner -cf "$work/tree.tar" -C "$root" opt
    # Warm the page cache so every tool reads from memory.
    cat "$work/tree.tar" > /dev/null
    find "$src" -type f -exec cat {} + > /dev/null
fi

write_spec() { # LEVEL: $work/bench-LEVEL.spec, payload wLEVEL.zstdio
    cat > "$work/bench-$1.spec" << EOF
%define _binary_payload w${1}.zstdio
%define __os_install_post %{nil}
%define debug_package %{nil}
%define _build_id_links none
Name: amdrocm-fft-host7.1
Version: 7.1.0
Release: bench
Summary: ROCm Fast Fourier Transform libraries for GPU computation
License: MIT
AutoReqProv: no

%description
High-performance FFT library implementations for AMD GPUs (bench/package.sh).

%install
echo "quarry-bench install start \$(date +%%s.%%N)"
mkdir -p %{buildroot}/opt/rocm
cp -al $root/opt/rocm/core-7.1 %{buildroot}/opt/rocm/
echo "quarry-bench install end \$(date +%%s.%%N)"

%files
%defattr(-,root,root,-)
/opt/rocm/core-7.1
EOF
}
write_spec "$level"
write_spec "$rpm_level"

# --- machine ---------------------------------------------------------------------------------
machine() {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "quarry: $("$quarry" --version) (git $quarry_rev; binary sha256 $(sha256sum "$quarry" | cut -c1-16);" \
        "libzstd $(awk '/^name = "zstd-sys"/ { getline; gsub(/"/, ""); sub(/.*zstd\./, ""); print; exit }' "$repo/Cargo.lock"), multi-threaded)"
    echo "dpkg-deb: $(dpkg-deb --version | sed -n 1p)"
    echo "rpmbuild: $(rpmbuild --version | sed -n 1p)"
    echo "zstd: $(zstd --version)"
    bench_host
}
machine > "$work/machine.txt"
cat "$work/machine.txt" >&2

# --- timing ----------------------------------------------------------------------------------
mkdir -p "$work/logs" "$work/out"
hz=$(getconf CLK_TCK)
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }

# run_timed KEY OUT CMD...: run CMD in $work, stdout to OUT, stderr to logs/KEY.err, after a
# `sync` (outside the timing). Sets wall (s), cpu (user+sys s), rss (peak, KiB) and other
# (cores busy with other work meanwhile, from /proc/stat minus CMD's own CPU).
run_timed() {
    local key=$1 out=$2
    shift 2
    sync
    local b0 b1 t0 t1
    b0=$(busy_ticks)
    t0=$(date +%s.%N)
    if ! /usr/bin/time -o "$work/time.txt" -f '%U %S %M' "$@" > "$out" 2> "$work/logs/$key.err"; then
        tail -20 "$work/logs/$key.err" >&2
        die "$key: $*"
    fi
    t1=$(date +%s.%N)
    b1=$(busy_ticks)
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
    cpu=$(awk '{ printf "%.2f", $1 + $2 }' "$work/time.txt")
    rss=$(awk '{ print $3 }' "$work/time.txt")
    other=$(awk -v d=$((b1 - b0)) -v hz="$hz" -v c="$cpu" -v w="$wall" \
        'BEGIN { o = (d / hz - c) / w; printf "%.2f", o < 0 ? 0 : o }')
}

declare -A best best_cpu best_other max_rss all_runs out_size
# record KEY [OUTPUT_FILE]: keep the run list, the best run, the largest RSS and the output size.
record() {
    local key=$1
    all_runs[$key]="${all_runs[$key]:+${all_runs[$key]}, }$wall"
    if [[ -z "${best[$key]:-}" ]] || awk -v a="$wall" -v b="${best[$key]}" 'BEGIN { exit !(a < b) }'; then
        best[$key]=$wall best_cpu[$key]=$cpu best_other[$key]=$other
    fi
    if [[ -z "${max_rss[$key]:-}" ]] || ((rss > max_rss[$key])); then max_rss[$key]=$rss; fi
    [[ -n "${2:-}" ]] && out_size[$key]=$(stat -c %s "$2")
    log "$(printf '%-14s %8s s  (cpu %s s, peak RSS %s MiB, other load %s)' "$key" "$wall" "$cpu" "$((rss / 1024))" "$other")"
}
# fresh KEY: an empty output directory for KEY.
fresh() {
    rm -rf "$work/out/$1"
    mkdir -p "$work/out/$1"
    echo "$work/out/$1"
}

# --- checks ----------------------------------------------------------------------------------
quarry_file() { # KEY JSON GLOB: the built file matching GLOB, after checking the summary
    python3 - "$2" "$3" << 'EOF' || die "$1: quarry's summary ($2) lacks $3 or lists a failure"
import fnmatch, json, sys
s = json.load(open(sys.argv[1]))
assert not s["failed"], s["failed"]
hits = [b["file"] for b in s["built"] if fnmatch.fnmatch(b["file"], sys.argv[2])]
assert len(hits) == 1, s["built"]
print(hits[0])
EOF
}
# Regular files as "size path", sorted; the count of symlinks on stderr's behalf in a 2nd file.
deb_files() { dpkg-deb --contents "$1" | awk '/^-/ { print $3, $6 }' | sed 's# \./# #' | sort -k2; }
deb_links() { dpkg-deb --contents "$1" | awk '/^l/' | wc -l; }
rpm_files() { rpm -qp --qf '[%{FILEMODES:perms} %{FILESIZES} %{FILENAMES}\n]' "$1" | awk '/^-/ { sub(/^\//, "", $3); print $2, $3 }' | sort -k2; }
rpm_links() { rpm -qp --qf '[%{FILEMODES:perms}\n]' "$1" | awk '/^l/' | wc -l; }
check_list() { # KEY WHAT LIST: the tree's files are all there (a deb also has Quarry's doc files)
    local got
    got=$(grep -c ' opt/rocm/core-7\.1/' <<< "$3" || true)
    ((got == n_files)) || die "$1: $2 lists $got regular files under opt/rocm/core-7.1/, expected $n_files"
}
check_deb() { # KEY DEB [MEMBER]
    local list member=${3:-data.tar.zst}
    list=$(deb_files "$2")
    check_list "$1" "$2" "$list"
    (($(deb_links "$2") == n_links)) || die "$1: $2 lacks the $n_links symlinks"
    ar t "$2" | grep -qx "$member" || die "$1: $2 has no $member ($(ar t "$2" | tr '\n' ' '))"
    printf '%s\n' "$list"
}
check_rpm() { # KEY RPM [LEVEL]
    local list comp entries want=${3:-$level}
    list=$(rpm_files "$2")
    check_list "$1" "$2" "$list"
    (($(rpm_links "$2") == n_links)) || die "$1: $2 lacks the $n_links symlinks"
    comp=$(rpm -qp --qf '%{PAYLOADCOMPRESSOR} %{PAYLOADFLAGS}' "$2")
    [[ "$comp" == "zstd $want" ]] || die "$1: $2 payload is '$comp', expected 'zstd $want'"
    rpm -K --nosignature "$2" > "$work/logs/$1.K" 2>&1 || die "$1: rpm -K: $(cat "$work/logs/$1.K")"
    entries=$(rpm2cpio "$2" | cpio -it --quiet | wc -l)
    ((entries >= n_files + n_links)) || die "$1: $2's payload holds $entries entries, expected >= $((n_files + n_links))"
    printf '%s\n' "$list"
}
quarry_args=(--rocm-version 7.1.0 --version-suffix bench --pkg-names amdrocm-fft --enable-kpack --target gfx942 --json)
zstd_args=(--deb-compression zstd --compression-level "$level")

# --- the rounds ------------------------------------------------------------------------------
rpm_install_s=()
round() {
    local r=$1 d q f list_q list_o
    # The limit: one core of the same codec and level, over a tar of the same files.
    run_timed zstd.st /dev/null zstd -q -"$level" --single-thread -c "$work/tree.tar"; record zstd.st
    run_timed zstd.t1 /dev/null zstd -q -"$level" -T1 -c "$work/tree.tar"; record zstd.t1
    run_timed zstd.t2 /dev/null zstd -q -"$level" -T2 -c "$work/tree.tar"; record zstd.t2

    # deb: Quarry.
    d=$(fresh deb.quarry)
    run_timed deb.quarry "$work/logs/deb.quarry.json" "$quarry" package deb --artifacts-dir "$art" --dest-dir "$d" "${quarry_args[@]}" "${zstd_args[@]}"
    q="$d/$(quarry_file deb.quarry "$work/logs/deb.quarry.json" 'amdrocm-fft-host7.1_*.deb')"
    record deb.quarry "$q"
    list_q=$(check_deb deb.quarry "$q")
    if ((r == 1)); then
        log "quarry built: $(python3 -c 'import json,sys; print(", ".join(b["file"] for b in json.load(open(sys.argv[1]))["built"]))' "$work/logs/deb.quarry.json")"
        # The same control members (control, md5sums) and doc files (copyright,
        # changelog.Debian.gz, lintian overrides) for dpkg-deb to pack.
        rm -rf "${root:?}/DEBIAN" "${root:?}/usr"
        dpkg-deb -e "$q" "$root/DEBIAN"
        dpkg-deb --fsys-tarfile "$q" | tar -xf - -C "$root" ./usr
        log "staged for dpkg-deb: DEBIAN/{$(cd "$root/DEBIAN" && echo *)} and $(find "$root/usr" -type f | wc -l) doc files from Quarry's deb"
    fi

    # md5sums as dh_md5sums would make them (dpkg-deb itself does not).
    # shellcheck disable=SC2016  # $1 is bash -c's
    run_timed deb.md5 "$work/md5sums" bash -c 'cd "$1" && find opt usr -type f -print0 | sort -z | xargs -0 md5sum' _ "$root"
    record deb.md5
    diff <(sort -k2 "$work/md5sums") <(sort -k2 "$root/DEBIAN/md5sums") > /dev/null \
        || die "Quarry's md5sums differ from md5sum(1)'s"

    # deb: dpkg-deb, default threads.
    d=$(fresh deb.dpkg)
    run_timed deb.dpkg /dev/null dpkg-deb --root-owner-group -Zzstd -z"$level" -b "$root" "$d/out.deb"
    record deb.dpkg "$d/out.deb"
    list_o=$(check_deb deb.dpkg "$d/out.deb")
    [[ "$list_q" == "$list_o" ]] || die "Quarry's deb and dpkg-deb's list different files or sizes"

    # deb: dpkg-deb with one compressor thread, as Quarry compresses.
    d=$(fresh deb.dpkg1)
    run_timed deb.dpkg1 /dev/null dpkg-deb --threads-max=1 --root-owner-group -Zzstd -z"$level" -b "$root" "$d/out.deb"
    record deb.dpkg1 "$d/out.deb"
    list_o=$(check_deb deb.dpkg1 "$d/out.deb")
    [[ "$list_q" == "$list_o" ]] || die "Quarry's deb and dpkg-deb --threads-max=1's list different files or sizes"

    # rpm: Quarry.
    rm -rf "$work/out/deb.quarry" "$work/out/deb.dpkg" "$work/out/deb.dpkg1"
    d=$(fresh rpm.quarry)
    run_timed rpm.quarry "$work/logs/rpm.quarry.json" "$quarry" package rpm --artifacts-dir "$art" --dest-dir "$d" "${quarry_args[@]}" "${zstd_args[@]}"
    q="$d/$(quarry_file rpm.quarry "$work/logs/rpm.quarry.json" 'amdrocm-fft-host7.1-*.rpm')"
    record rpm.quarry "$q"
    list_q=$(check_rpm rpm.quarry "$q")

    # rpm: rpmbuild.
    d=$(fresh rpm.rpmbuild)
    run_timed rpm.rpmbuild "$work/logs/rpm.rpmbuild.out" rpmbuild -bb --define "_topdir $d" "$work/bench-$level.spec"
    f=$(find "$d/RPMS" -name 'amdrocm-fft-host7.1-*.rpm')
    [[ -n "$f" ]] || die "rpm.rpmbuild: no rpm in $d/RPMS"
    record rpm.rpmbuild "$f"
    rpm_install_s+=("$(awk '/^quarry-bench install start/ { a = $4 } /^quarry-bench install end/ { b = $4 } END { printf "%.3f", b - a }' \
        "$work/logs/rpm.rpmbuild.out" "$work/logs/rpm.rpmbuild.err")")
    list_o=$(check_rpm rpm.rpmbuild "$f")
    [[ "$list_q" == "$list_o" ]] || die "Quarry's rpm and rpmbuild's list different files or sizes"
    rm -rf "$work/out/rpm.quarry" "$work/out/rpm.rpmbuild"
}

# TheRock's levels: debs `-Zxz` (dpkg-deb's xz default, level 6), rpms `w9.zstdio`.
round_therock() {
    local d q f list_q list_o
    d=$(fresh deb.quarry.xz)
    run_timed deb.quarry.xz "$work/logs/deb.quarry.xz.json" "$quarry" package deb --artifacts-dir "$art" --dest-dir "$d" \
        "${quarry_args[@]}" --deb-compression xz --compression-level "$xz_level"
    q="$d/$(quarry_file deb.quarry.xz "$work/logs/deb.quarry.xz.json" 'amdrocm-fft-host7.1_*.deb')"
    record deb.quarry.xz "$q"
    list_q=$(check_deb deb.quarry.xz "$q" data.tar.xz)
    d=$(fresh deb.dpkg.xz)
    run_timed deb.dpkg.xz /dev/null dpkg-deb --root-owner-group -Zxz -z"$xz_level" -b "$root" "$d/out.deb"
    record deb.dpkg.xz "$d/out.deb"
    list_o=$(check_deb deb.dpkg.xz "$d/out.deb" data.tar.xz)
    [[ "$list_q" == "$list_o" ]] || die "Quarry's xz deb and dpkg-deb's list different files or sizes"
    rm -rf "$work/out/deb.quarry.xz" "$work/out/deb.dpkg.xz"

    d=$(fresh rpm.quarry.w9)
    run_timed rpm.quarry.w9 "$work/logs/rpm.quarry.w9.json" "$quarry" package rpm --artifacts-dir "$art" --dest-dir "$d" \
        "${quarry_args[@]}" --compression-level "$rpm_level"
    q="$d/$(quarry_file rpm.quarry.w9 "$work/logs/rpm.quarry.w9.json" 'amdrocm-fft-host7.1-*.rpm')"
    record rpm.quarry.w9 "$q"
    list_q=$(check_rpm rpm.quarry.w9 "$q" "$rpm_level")
    d=$(fresh rpm.rpmbuild.w9)
    run_timed rpm.rpmbuild.w9 "$work/logs/rpm.rpmbuild.w9.out" rpmbuild -bb --define "_topdir $d" "$work/bench-$rpm_level.spec"
    f=$(find "$d/RPMS" -name 'amdrocm-fft-host7.1-*.rpm')
    [[ -n "$f" ]] || die "rpm.rpmbuild.w9: no rpm in $d/RPMS"
    record rpm.rpmbuild.w9 "$f"
    list_o=$(check_rpm rpm.rpmbuild.w9 "$f" "$rpm_level")
    [[ "$list_q" == "$list_o" ]] || die "Quarry's w$rpm_level rpm and rpmbuild's list different files or sizes"
    rm -rf "$work/out/rpm.quarry.w9" "$work/out/rpm.rpmbuild.w9"
}

# BIG=1: Quarry's deb and rpm (zstd -$level) against `tar | zstd -T0` on the same tree, once
# each, for peak RSS and throughput at sizes where a payload held in memory would show.
if ((big == 1)); then
    d=$(fresh deb.quarry)
    run_timed deb.quarry "$work/logs/deb.quarry.json" "$quarry" package deb --artifacts-dir "$art" --dest-dir "$d" "${quarry_args[@]}" "${zstd_args[@]}"
    record deb.quarry "$d/$(quarry_file deb.quarry "$work/logs/deb.quarry.json" 'amdrocm-fft-host7.1_*.deb')"
    rm -rf "$work/out/deb.quarry"
    d=$(fresh rpm.quarry)
    run_timed rpm.quarry "$work/logs/rpm.quarry.json" "$quarry" package rpm --artifacts-dir "$art" --dest-dir "$d" "${quarry_args[@]}" "${zstd_args[@]}"
    q="$d/$(quarry_file rpm.quarry "$work/logs/rpm.quarry.json" 'amdrocm-fft-host7.1-*.rpm')"
    record rpm.quarry "$q"
    rpm -K --nosignature "$q" > "$work/logs/rpm.quarry.K" 2>&1 || die "rpm -K: $(cat "$work/logs/rpm.quarry.K")"
    rm -rf "$work/out/rpm.quarry"
    # shellcheck disable=SC2016  # $1 and $2 are bash -c's
    run_timed tar.zstd /dev/null bash -c 'tar --sort=name --owner=0 --group=0 --numeric-owner --hard-dereference -cf - -C "$1" opt | zstd -q -"$2" -T0 -c > /dev/null' _ "$root" "$level"
    record tar.zstd
    mbs() { awk -v b="$in_bytes" -v w="${best[$1]}" 'BEGIN { printf "%.0f", b / 1e6 / w }'; }
    echo '```'
    cat "$work/machine.txt"
    echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo '```'
    echo
    echo "Input: $n_files files, $in_bytes bytes ($((in_bytes / 1048576)) MiB; about half seeded-random, half token soup), zstd -$level, one run each."
    echo
    echo '| measurement | wall s | MB/s | throughput vs `tar \| zstd -T0` | CPU s | peak RSS MiB | output MiB | other load (cores) |'
    echo '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |'
    for k in tar.zstd deb.quarry rpm.quarry; do
        printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$k" "${best[$k]}" "$(mbs "$k")" \
            "$(awk -v l="${best[tar.zstd]}" -v w="${best[$k]}" 'BEGIN { printf "%.0f%%", 100 * l / w }')" \
            "${best_cpu[$k]}" "$((max_rss[$k] / 1024))" \
            "$([[ -n "${out_size[$k]:-}" ]] && echo $((out_size[$k] / 1048576)) || echo '—')" "${best_other[$k]}"
    done
    exit 0
fi

log "SIZE_MB = $size_mb; zstd level $level; $runs rounds; each round runs every tool once"
for r in $(seq 1 "$runs"); do
    log "round $r/$runs"
    round "$r"
    if ((therock == 1 && r == 1)); then
        log "TheRock's levels: deb xz -$xz_level, rpm w$rpm_level.zstdio (one round)"
        round_therock
    fi
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

# --- summary ---------------------------------------------------------------------------------
mbs() { awk -v b="$in_bytes" -v w="${best[$1]}" 'BEGIN { printf "%.0f", b / 1e6 / w }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { r = a / b; printf(r >= 100 ? "%.0f" : r >= 10 ? "%.1f" : "%.2f", r) }'; }
of_limit() { awk -v l="${best[zstd.st]}" -v w="${best[$1]}" 'BEGIN { printf "%.0f%%", 100 * l / w }'; }
mib() { awk -v k="$1" 'BEGIN { printf "%.0f", k / 1024 }'; }
row() { # KEY COMMAND NOTES
    local k=$1 size='—'
    [[ -n "${out_size[$k]:-}" ]] && size=$(awk -v s="${out_size[$k]}" 'BEGIN { printf "%.0f", s / 1048576 }')
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$2" "${best[$k]}" "${all_runs[$k]}" "$(mbs "$k")" \
        "$(of_limit "$k")" "${best_cpu[$k]}" "$(mib "${max_rss[$k]}")" "$size" "${best_other[$k]}" "$3"
}
md5_dpkg=$(awk -v a="${best[deb.md5]}" -v b="${best[deb.dpkg]}" 'BEGIN { printf "%.3f", a + b }')
install_s=$(printf '%s\n' "${rpm_install_s[@]}" | sort -n | head -1)
dpkg_parallelism() { awk -v a="${best[$1]}" -v c="${best_cpu[$1]}" 'BEGIN { printf "%.2f", c / a }'; }

echo '```'
cat "$work/machine.txt"
echo "load average at end: $load_end"
echo '```'
echo
echo "Input: a synthetic TheRock artifacts tree, $n_files files + $n_links symlinks, $in_bytes bytes" \
    "($((in_bytes / 1048576)) MiB: about half seeded-random, half token soup), all of it in amdrocm-fft-host7.1" \
    "under /opt/rocm/core-7.1/; page-cached. zstd level $level for every tool. Wall seconds, best of $runs rounds;" \
    "MB/s = input bytes / 10^6 / best wall; \"of limit\" = single-core \`zstd -$level --single-thread\` wall / this wall;" \
    "peak RSS = the largest over the runs, of the largest single process (/usr/bin/time %M)." \
    "Ratio = other tool / Quarry, so > 1 means Quarry is faster."
echo
echo "| comparison | other (s) | Quarry (s) | ratio |"
echo '| --- | ---: | ---: | ---: |'
# shellcheck disable=SC2016  # the backquotes are markdown
{
    printf '| deb: `dpkg-deb -Zzstd -z%s -b` vs `quarry package deb` | %s | %s | **%s** |\n' "$level" "${best[deb.dpkg]}" "${best[deb.quarry]}" "$(ratio "${best[deb.dpkg]}" "${best[deb.quarry]}")"
    printf '| deb: `md5sum` (dh_md5sums) + `dpkg-deb -b` vs `quarry package deb` | %s | %s | **%s** |\n' "$md5_dpkg" "${best[deb.quarry]}" "$(ratio "$md5_dpkg" "${best[deb.quarry]}")"
    printf '| deb: `dpkg-deb --threads-max=1 -Zzstd -z%s -b` vs `quarry package deb` | %s | %s | **%s** |\n' "$level" "${best[deb.dpkg1]}" "${best[deb.quarry]}" "$(ratio "${best[deb.dpkg1]}" "${best[deb.quarry]}")"
    printf '| rpm: `rpmbuild -bb` (w%s.zstdio) vs `quarry package rpm` | %s | %s | **%s** |\n' "$level" "${best[rpm.rpmbuild]}" "${best[rpm.quarry]}" "$(ratio "${best[rpm.rpmbuild]}" "${best[rpm.quarry]}")"
    if ((therock == 1)); then
        printf '| TheRock deb: `dpkg-deb -Zxz -z%s -b` vs `quarry package deb --deb-compression xz` | %s | %s | **%s** |\n' "$xz_level" "${best[deb.dpkg.xz]}" "${best[deb.quarry.xz]}" "$(ratio "${best[deb.dpkg.xz]}" "${best[deb.quarry.xz]}")"
        printf '| TheRock rpm: `rpmbuild -bb` (w%s.zstdio) vs `quarry package rpm --compression-level %s` | %s | %s | **%s** |\n' "$rpm_level" "$rpm_level" "${best[rpm.rpmbuild.w9]}" "${best[rpm.quarry.w9]}" "$(ratio "${best[rpm.rpmbuild.w9]}" "${best[rpm.quarry.w9]}")"
    fi
}
echo
echo '| measurement | best s | runs (s) | MB/s | of limit | CPU s (best run) | peak RSS MiB | output MiB | other load (cores) | notes |'
echo '| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |'
row zstd.st "limit: \`zstd -$level --single-thread -c tree.tar\`" "one core, no I/O thread; the tar is $(mib "$(($(stat -c %s "$work/tree.tar") / 1024))") MiB"
row zstd.t1 "\`zstd -$level -T1 -c tree.tar\`" "one compression worker + an I/O thread"
row zstd.t2 "\`zstd -$level -T2 -c tree.tar\`" "two workers"
row deb.quarry "\`quarry package deb … --deb-compression zstd --compression-level $level\`" "output = the host .deb; also builds the gfx942 and meta debs; read, md5 and tar on one thread, zstd workers = CPUs (the job count shared by bytes); fsyncs each output"
row deb.md5 "\`find opt usr -type f -print0 \\| sort -z \\| xargs -0 md5sum\` (what dh_md5sums adds)" "not part of dpkg-deb"
row deb.dpkg "\`dpkg-deb --root-owner-group -Zzstd -z$level -b ROOT out.deb\`" "tar, zstd (libzstd workers = CPUs) and ar in 3 processes: CPU/wall $(dpkg_parallelism deb.dpkg); fsyncs the output"
row deb.dpkg1 "\`dpkg-deb --threads-max=1 --root-owner-group -Zzstd -z$level -b ROOT out.deb\`" "one compressor thread; tar still a separate process: CPU/wall $(dpkg_parallelism deb.dpkg1)"
row rpm.quarry "\`quarry package rpm … --compression-level $level\`" "output = the host .rpm; also builds the gfx942 and meta rpms; payload streamed to a temporary file (file SHA-256s, cpio SHA-256, payload SHA-256 on the way), zstd workers = CPUs; fsyncs each output"
row rpm.rpmbuild "\`rpmbuild -bb\` (w$level.zstdio, no brp, AutoReqProv: no)" "includes %install \`cp -al\` of the staged tree: ${install_s} s; no fsync"
if ((therock == 1)); then
    row deb.quarry.xz "\`quarry package deb … --deb-compression xz --compression-level $xz_level\`" "TheRock's -Zxz; liblzma's multi-threaded encoder, all cores; one round"
    row deb.dpkg.xz "\`dpkg-deb --root-owner-group -Zxz -z$xz_level -b ROOT out.deb\`" "xz threads = CPUs; one round"
    row rpm.quarry.w9 "\`quarry package rpm … --compression-level $rpm_level\`" "TheRock's w$rpm_level.zstdio; one round"
    row rpm.rpmbuild.w9 "\`rpmbuild -bb\` (w$rpm_level.zstdio)" "rpm's zstdio: one compression thread; one round"
fi
echo
echo "Checks passed: the three debs list the same regular files with the same sizes (the tree's $n_files and Quarry's" \
    "doc files) and the $n_links symlinks" \
    "(dpkg-deb --contents, which decompresses the payload), data member data.tar.zst; Quarry's md5sums equal" \
    "md5sum(1)'s; both rpms list the same files and sizes, payload zstd $level, \`rpm -K --nosignature\` OK, payload" \
    "decompresses (rpm2cpio | cpio -t) to all entries; Quarry's summary lists no failure."
