#!/usr/bin/env bash
# `+1 .rpm` (or `.deb`) into a 2,000-package repo, interleaved round by round between Quarry
# binaries and the tool a user would run instead, so a machine whose speed drifts (a shared or
# busy VM) hits every contender alike. Prints the median and best wall time of each, with
# `perf stat`'s task-clock and page faults for Quarry's runs when perf works here.
#
#   bench/native_ab.sh FIXTURES BIN [BIN...]
#
#   FIXTURES  what tests/fixtures/native/build.sh FIXTURES --many N+1 wrote (bench/native.sh's
#             FIXTURES=DIR keeps one); package N+1 is the "+1"
#   BIN       release builds of `quarry` to compare (each on its own copy of the repo)
#   KIND=rpm  rpm (against `createrepo_c --update`) or deb (against `apt-ftparchive --db`, warm)
#   ROUNDS=15 rounds; each adds the package, times the reindex, then removes it and reindexes
#   PERF=1    run Quarry under `perf stat` for its task-clock and page faults (perf's own start
#             then counts in Quarry's wall time, so leave it off for the ratios)
#
# Ratios are other tool / Quarry (> 1: Quarry is faster). Scratch files go to a temporary
# directory removed at exit (BENCH_KEEP=1 keeps it).
set -euo pipefail

fixtures="${1:?usage: bench/native_ab.sh FIXTURES BIN [BIN...]}"
shift
[[ $# -ge 1 ]] || { echo "usage: bench/native_ab.sh FIXTURES BIN [BIN...]" >&2; exit 2; }
kind="${KIND:-rpm}"
rounds="${ROUNDS:-15}"
case "$kind" in
    rpm) root=1-linux/packages/rpm/x86_64 pattern='*.rpm' ;;
    deb) root=1-linux/packages/deb/pool/main pattern='*.deb' ;;
    *) echo "KIND must be rpm or deb" >&2; exit 2 ;;
esac
# The held-back package: the highest-numbered fixture.
extra="$(find "$fixtures/$kind" -maxdepth 1 -name "$pattern" | sort -V | tail -1)"
[[ -f "$extra" ]] || { echo "no $pattern fixtures in $fixtures/$kind" >&2; exit 2; }
work="$(mktemp -d "${TMPDIR:-/tmp}/quarry-native-ab.XXXXXX")"
[[ "${BENCH_KEEP:-0}" == 1 ]] || trap 'rm -rf "$work"' EXIT
perf_ok=0
[[ "${PERF:-0}" == 1 ]] && perf stat -x, -e task-clock true > /dev/null 2>&1 && perf_ok=1

ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (b - a) / 1e6 }'; }

# One copy of the repo per contender, indexed (or, for the other tool, built) once.
names=()
for bin in "$@"; do
    name="$(basename "$bin")"
    names+=("$name")
    mkdir -p "$work/$name/$root"
    find "$fixtures/$kind" -maxdepth 1 -name "$pattern" ! -path "$extra" -exec cp -p -t "$work/$name/$root/" {} +
    "$bin" index "$work/$name" --prefix "${root%pool/main}" > /dev/null 2>&1
done
other_dir="$work/other"
mkdir -p "$other_dir"
find "$fixtures/$kind" -maxdepth 1 -name "$pattern" ! -path "$extra" -exec cp -p -t "$other_dir/" {} +
if [[ "$kind" == rpm ]]; then
    other_name="createrepo_c --update"
    createrepo_c -q "$other_dir"
    other() { createrepo_c -q --update "$other_dir" > /dev/null 2>&1; }
else
    other_name="apt-ftparchive --db (warm)"
    other() { (cd "$other_dir" && apt-ftparchive --db "$work/cache.db" packages . > "$work/Packages" 2> /dev/null); }
    other
fi

for round in $(seq 1 "$rounds"); do
    for i in "${!names[@]}"; do
        bin="${*:i+1:1}" name="${names[$i]}"
        cp -p "$extra" "$work/$name/$root/"
        sync
        t0=$(date +%s%N)
        if ((perf_ok)); then
            perf stat -x, -o "$work/perf" -e task-clock,page-faults "$bin" index "$work/$name" --prefix "${root%pool/main}" > /dev/null 2>&1
        else
            "$bin" index "$work/$name" --prefix "${root%pool/main}" > /dev/null 2>&1
        fi
        t1=$(date +%s%N)
        clock=- faults=-
        if ((perf_ok)); then
            clock="$(awk -F, '/task-clock/ { print $1 }' "$work/perf")"
            faults="$(awk -F, '/page-faults/ { print $1 }' "$work/perf")"
        fi
        echo "$(ms "$t0" "$t1") $clock $faults" >> "$work/$name.runs"
        rm "$work/$name/$root/$(basename "$extra")"
        "$bin" index "$work/$name" --prefix "${root%pool/main}" > /dev/null 2>&1
    done
    cp -p "$extra" "$other_dir/"
    sync
    t0=$(date +%s%N)
    other
    t1=$(date +%s%N)
    echo "$(ms "$t0" "$t1") - -" >> "$work/other.runs"
    rm "$other_dir/$(basename "$extra")"
    other
done

summary() { # FILE: median wall, best wall, median task-clock, median faults
    python3 - "$1" << 'EOF'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
med = lambda col: statistics.median(float(r[col]) for r in rows) if rows[0][col] != "-" else None
wall = [float(r[0]) for r in rows]
fmt = lambda v, f: "-" if v is None else f % v
print(f"{statistics.median(wall):.1f} {min(wall):.1f} {fmt(med(1), '%.1f')} {fmt(med(2), '%.0f')}")
EOF
}
read -r other_med other_best _ _ <<< "$(summary "$work/other.runs")"
echo "\`+1 .$kind\` into $(find "$fixtures/$kind" -maxdepth 1 -name "$pattern" | wc -l | awk '{print $1 - 1}') packages, $rounds interleaved rounds, $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| contender | wall median (ms) | wall best (ms) | task-clock median (ms) | page faults median | ratio (median, best) |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for name in "${names[@]}"; do
    read -r med best clock faults <<< "$(summary "$work/$name.runs")"
    ratio="$(awk -v o="$other_med" -v q="$med" -v ob="$other_best" -v qb="$best" 'BEGIN { printf "%.2f, %.2f", o / q, ob / qb }')"
    echo "| quarry \`$name\` | $med | $best | $clock | $faults | **$ratio** |"
done
echo "| $other_name | $other_med | $other_best | - | - | |"
