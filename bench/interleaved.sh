#!/usr/bin/env bash
# `quarry index` from scratch against dumb-pypi, runs interleaved (quarry, dumb-pypi default,
# dumb-pypi --no-per-release-json, repeated), so a noisy shared machine hits all three alike.
# Prints each run (wall, CPU user + sys, peak RSS), then the best and the median of each, wall
# and CPU, with the ratios (dumb-pypi / Quarry).
#
#   bench/interleaved.sh QUARRY DATA [ROUNDS]
#
#   QUARRY  the release binary to time
#   DATA    what bench/gen_wheels.py --out DATA wrote (DATA/wheels, DATA/packages.jsonl)
#   ROUNDS  default 5
#   BENCH_VENV  the venv with dumb-pypi (default ~/.cache/quarry-bench-venv; bench/run.sh makes it)
#   NO_DUMB_PYPI=1  time Quarry alone (e.g. 100,000 wheels)
#   LINK=1  hard-link the wheels into each fresh root instead of copying them (100,000 copies
#           take minutes on a busy disk; Quarry never writes a wheel). DATA/wheels must be on
#           the same filesystem as TMPDIR, and a copy of its own: nothing may write it.
set -euo pipefail

quarry="$1"
data="$2"
rounds="${3:-5}"
venv="${BENCH_VENV:-$HOME/.cache/quarry-bench-venv}"
work="$(mktemp -d "${TMPDIR:-/tmp}/quarry-interleaved.XXXXXX")"
# BENCH_KEEP=1 leaves the runs' directories (deleting them here slows whatever runs next on a disk
# mounted with `discard`).
[[ "${BENCH_KEEP:-0}" == 1 ]] || trap 'rm -rf "$work"' EXIT

cpu_file="$work/cpu"
seconds() { # command...: wall seconds; CPU seconds (user + sys) and peak RSS (KiB) go to $cpu_file
    local start end
    start="$(date +%s.%N)"
    /usr/bin/time -f '%U %S %M' -o "$cpu_file" "$@" >/dev/null 2>&1
    end="$(date +%s.%N)"
    echo "$end - $start" | bc
}

declare -A times cpus
tools=(quarry)
[[ "${NO_DUMB_PYPI:-0}" == 1 ]] || tools+=(dumb-pypi dumb-pypi-no-per-release-json)
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$rounds"); do
    for tool in "${tools[@]}"; do
        # Each run writes a fresh directory and nothing is deleted until the end: this disk is
        # mounted with `discard`, and the discards of one run's deleted files would otherwise
        # land in the next run's journal commits (system CPU doubling round after round).
        out="$work/out.$round.$tool"
        mkdir -p "$out/bench-linux/python"
        case "$tool" in
            quarry)
                if [[ "${LINK:-0}" == 1 ]]; then
                    cp -al "$data/wheels/." "$out/bench-linux/python/"
                else
                    cp -a "$data/wheels/." "$out/bench-linux/python/"
                fi
                sync
                t="$(seconds "$quarry" index "$out")"
                ;;
            dumb-pypi)
                t="$(seconds "$venv/bin/dumb-pypi" --package-list-json "$data/packages.jsonl" \
                    --output-dir "$out" --packages-url ../../pool/)"
                ;;
            *)
                t="$(seconds "$venv/bin/dumb-pypi" --package-list-json "$data/packages.jsonl" \
                    --output-dir "$out" --packages-url ../../pool/ --no-per-release-json)"
                ;;
        esac
        times[$tool]="${times[$tool]:-} $t"
        read -r user sys rss <"$cpu_file"
        cpu="$(echo "$user + $sys" | bc)"
        cpus[$tool]="${cpus[$tool]:-} $cpu"
        printf 'round %d %-32s %6.2f s wall, %6.2f s CPU (user %s + sys %s), peak RSS %d MiB (load %s)\n' \
            "$round" "$tool" "$t" "$cpu" "$user" "$sys" "$((rss / 1024))" "$(cut -d' ' -f1 /proc/loadavg)"
    done
done
stat() { # best|median, then numbers
    local which="$1"
    shift
    printf '%s\n' "$@" | sort -g | if [[ "$which" == best ]]; then head -1; else awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; fi
}
for which in best median; do
    # shellcheck disable=SC2086  # word splitting of the recorded times is intended
    q="$(stat "$which" ${times[quarry]})"
    line="$which: quarry ${q} s"
    if [[ "${NO_DUMB_PYPI:-0}" != 1 ]]; then
        # shellcheck disable=SC2086
        d="$(stat "$which" ${times[dumb-pypi]})"
        # shellcheck disable=SC2086
        n="$(stat "$which" ${times[dumb-pypi-no-per-release-json]})"
        line="$line | dumb-pypi $d s, ratio $(echo "scale=2; $d / $q" | bc) | dumb-pypi --no-per-release-json $n s, ratio $(echo "scale=2; $n / $q" | bc)"
    fi
    echo "$line"
    # shellcheck disable=SC2086
    q="$(stat "$which" ${cpus[quarry]})"
    line="$which CPU (user + sys): quarry ${q} s"
    if [[ "${NO_DUMB_PYPI:-0}" != 1 ]]; then
        # shellcheck disable=SC2086
        d="$(stat "$which" ${cpus[dumb-pypi]})"
        # shellcheck disable=SC2086
        n="$(stat "$which" ${cpus[dumb-pypi-no-per-release-json]})"
        line="$line | dumb-pypi $d s, ratio $(echo "scale=2; $d / $q" | bc) | dumb-pypi --no-per-release-json $n s, ratio $(echo "scale=2; $n / $q" | bc)"
    fi
    echo "$line"
done
