#!/usr/bin/env bash
# Quarry's apt and dnf indexing against the tools a user would run instead.
#
#   bench/native.sh          # N = 2000 packages of each kind, best of 3 (dpkg-scanpackages: 1 run)
#   bench/native.sh 200      # a quick run: about 20 s after the release build
#
# What is timed (wall seconds, `date +%s.%N` around the command; CPU from /usr/bin/time):
#
#   debs, from scratch   N .debs in STORE/1-linux/packages/deb/pool/main/:
#                          quarry index STORE --prefix ROOT                 (Packages, .gz, .xz, Release)
#                          apt-ftparchive packages pool/main > Packages     (cold, no --db)
#                          apt-ftparchive --db cache.db packages pool/main  (cold, creates the db)
#                          dpkg-scanpackages --multiversion pool/main /dev/null > Packages
#   debs, +1             one more .deb dropped into the repo each tool just built, same commands
#                        (quarry reads only the new file: its state is present; apt-ftparchive
#                        without --db rereads all; with --db its cache is warm)
#   rpms, from scratch   N .rpms in STORE/1-linux/packages/rpm/x86_64/:
#                          quarry index STORE --prefix ROOT                 (primary, filelists, other)
#                          createrepo_c DIR                                 (0.17 default: also sqlite)
#                          createrepo_c --no-database DIR
#   rpms, +1             one more .rpm dropped in, then quarry index / createrepo_c --update
#                        [--no-database] over the repo each just built
#
# Fixtures are tests/fixtures/native/build.sh OUT --many N+1 (dpkg-deb and rpmbuild); package
# N+1 (a new name) is held back as the "+1" file. Every tool works on its own fresh copy of the
# same files, and each run's output is checked (the Packages stanza count, primary.xml.gz's
# packages="…", Quarry's report line), so a broken run cannot look fast. The "+1" case of each
# tool runs in the directory its from-scratch run just produced: Quarry's local store keys files
# by inode, so a copied repo would look all new to it. Ratios are other tool / Quarry: > 1 means
# Quarry is faster.
#
# Environment knobs:
#   RUNS=3        rounds; the best (lowest) wall time of each measurement is reported
#   SCAN_RUNS     rounds that include dpkg-scanpackages (default: RUNS if N <= 500, else 1; 0: none)
#   SKIP_BUILD=1  use the existing target/release/quarry
#   QUARRY_BIN=F  benchmark the binary F instead (no build)
#   DISCOVER=1    run `quarry index STORE` without --prefix (it lists the store to find the root)
#   FIXTURES=DIR  build the fixtures into DIR once and reuse them on later runs with the same N
#   BENCH_KEEP=1  keep the scratch directory (default: removed at exit)
#
# Prints a markdown summary on stdout (ready for bench/RESULTS.md); progress goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
n="${1:-2000}"
[[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "usage: bench/native.sh [N]  (N > 0, default 2000)" >&2; exit 2; }
runs="${RUNS:-3}"
if [[ -n "${SCAN_RUNS:-}" ]]; then scan_runs="$SCAN_RUNS"; elif ((n <= 500)); then scan_runs="$runs"; else scan_runs=1; fi
m=$((n + 1))

# shellcheck source=bench/lib.sh
source "$here/lib.sh"
bench_setup native

for tool in cargo dpkg-deb dpkg-scanpackages apt-ftparchive rpmbuild createrepo_c /usr/bin/time; do
    command -v "$tool" > /dev/null || die "missing $tool"
done
# An unsigned repo, as the other tools write.
unset QUARRY_SIGNING_KEY QUARRY_SIGNING_KEY_FILE

# --- quarry ----------------------------------------------------------------------------------
if [[ -n "${QUARRY_BIN:-}" ]]; then
    # A given binary (e.g. a copy of a release build from a shared target dir).
    [[ -x "$QUARRY_BIN" ]] || die "QUARRY_BIN=$QUARRY_BIN is not executable"
    cp "$QUARRY_BIN" "$work/quarry"
    quarry="$work/quarry"
    quarry_rev="$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?') (QUARRY_BIN=$QUARRY_BIN)"
else
    bench_quarry
fi

# --- fixtures --------------------------------------------------------------------------------
fx="${FIXTURES:-$work/fx}"
count() { find "$1" -maxdepth 1 -name "$2" | wc -l; }
extra_deb="$fx/deb/quarry-many-${m}_1.0.${m}-1_amd64.deb"
extra_rpm="$fx/rpm/quarry-many-${m}-1.0-1.noarch.rpm"
if [[ -d "$fx/deb" && -d "$fx/rpm" ]] && (($(count "$fx/deb" '*.deb') == m && $(count "$fx/rpm" '*.rpm') == m)); then
    log "reusing the $m+$m fixture packages in $fx"
elif [[ -e "$fx" && -n "$(ls -A "$fx")" ]]; then
    die "$fx holds something other than $m debs and $m rpms; point FIXTURES at an empty or new directory"
else
    log "building $m .debs and $m .rpms (tests/fixtures/native/build.sh $fx --many $m)"
    t0=$(date +%s.%N)
    "$repo/tests/fixtures/native/build.sh" "$fx" --many "$m"
    log "fixtures built in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
fi
[[ -f "$extra_deb" && -f "$extra_rpm" ]] || die "fixture set lacks $extra_deb or $extra_rpm"

# The N packages (all but the held-back N+1) in the store layout; every run copies from here.
mkdir -p "$work/base/deb/1-linux/packages/deb/pool/main" "$work/base/rpm/1-linux/packages/rpm/x86_64"
find "$fx/deb" -maxdepth 1 -name '*.deb' ! -path "$extra_deb" -exec cp -p -t "$work/base/deb/1-linux/packages/deb/pool/main/" {} +
find "$fx/rpm" -maxdepth 1 -name '*.rpm' ! -path "$extra_rpm" -exec cp -p -t "$work/base/rpm/1-linux/packages/rpm/x86_64/" {} +
(($(count "$work/base/deb/1-linux/packages/deb/pool/main" '*.deb') == n)) || die "base deb count"
(($(count "$work/base/rpm/1-linux/packages/rpm/x86_64" '*.rpm') == n)) || die "base rpm count"
kib() { find "$1" -type f -printf '%s\n' | awk '{ s += $1 } END { printf "%d", s / 1024 }'; }
deb_kib=$(kib "$work/base/deb") rpm_kib=$(kib "$work/base/rpm")

# --- machine ---------------------------------------------------------------------------------
machine() {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "quarry: $("$quarry" --version) (git $quarry_rev; binary sha256 $(sha256sum "$quarry" | cut -c1-16))"
    echo "apt-ftparchive: $(apt-ftparchive --version | sed -n 1p)"
    echo "dpkg-scanpackages: $(dpkg-scanpackages --version | sed -n 1p)"
    echo "createrepo_c: $(createrepo_c --version | sed -n 1p)"
    echo "dpkg-deb: $(dpkg-deb --version | sed -n 1p)"
    echo "rpmbuild: $(rpmbuild --version | sed -n 1p)"
    bench_host
}
machine > "$work/machine.txt"
cat "$work/machine.txt" >&2

# --- timing ----------------------------------------------------------------------------------
mkdir -p "$work/logs"
hz=$(getconf CLK_TCK)
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }

# run_timed KEY DIR OUT CMD...: run CMD in DIR, stdout to OUT, stderr to logs/KEY.err, after a
# `sync` (outside the timing). Sets wall (s), cpu (user+sys s of CMD) and other (cores busy with
# other work meanwhile, from /proc/stat minus CMD's own CPU).
run_timed() {
    local key=$1 dir=$2 out=$3
    shift 3
    sync
    cd "$dir"
    local b0 b1 t0 t1
    b0=$(busy_ticks)
    t0=$(date +%s.%N)
    if ! /usr/bin/time -o "$work/time.txt" -f '%U %S' "$@" > "$out" 2> "$work/logs/$key.err"; then
        tail -20 "$work/logs/$key.err" >&2
        die "$key: $* (in $dir)"
    fi
    t1=$(date +%s.%N)
    b1=$(busy_ticks)
    cd "$work"
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
    cpu=$(awk '{ printf "%.2f", $1 + $2 }' "$work/time.txt")
    other=$(awk -v d=$((b1 - b0)) -v hz="$hz" -v c="$cpu" -v w="$wall" \
        'BEGIN { o = (d / hz - c) / w; printf "%.2f", o < 0 ? 0 : o }')
}

declare -A best best_cpu best_other best_ops all_runs
# record KEY: keep the run list and the best run of KEY (with Quarry's store operation counts).
record() {
    local key=$1
    all_runs[$key]="${all_runs[$key]:+${all_runs[$key]}, }$wall"
    if [[ -z "${best[$key]:-}" ]] || awk -v a="$wall" -v b="${best[$key]}" 'BEGIN { exit !(a < b) }'; then
        best[$key]=$wall best_cpu[$key]=$cpu best_other[$key]=$other
        best_ops[$key]=$(sed -n 's/.*store operations: \([^)]*)\).*/; store ops: \1/p' "$work/logs/$key.err")
    fi
    log "$(printf '%-22s %8s s  (cpu %s s, other load %s)' "$key" "$wall" "$cpu" "$other")"
}

# fresh NAME KIND: a new copy of the N packages of KIND (deb|rpm) at run/NAME; prints the store.
fresh() {
    # The last copy is moved aside, not deleted: this disk is mounted with `discard`, and deleting
    # thousands of files slows the file creation of the runs that follow. $work goes at exit.
    mkdir -p "$work/run" "$work/old"
    if [[ -e "$work/run/$1" ]]; then mv "$work/run/$1" "$(mktemp -d "$work/old/$1.XXXXXX")/"; fi
    cp -a "$work/base/$2" "$work/run/$1"
    echo "$work/run/$1"
}

# --- checks ----------------------------------------------------------------------------------
stanzas() { grep -c '^Package:' "$1" || true; }
check_packages() { # KEY FILE EXPECTED
    local got
    got=$(stanzas "$2")
    [[ "$got" == "$3" ]] || die "$1: $2 lists $got packages, expected $3"
}
# primary_href REPO_DIR: where repomd.xml says primary.xml.gz is. Consumers of a pipe below read
# it whole (no `head`, no early exit): a SIGPIPE'd producer would fail the run under pipefail.
primary_href() { awk '/<data type="primary">/ { p = 1 } p && match($0, /href="[^"]*"/) { print substr($0, RSTART + 6, RLENGTH - 7); exit }' "$1/repodata/repomd.xml"; }
primary_count() { # REPO_DIR: packages="…" of that primary.xml.gz
    local href
    href=$(primary_href "$1")
    [[ -n "$href" ]] || { echo "no-primary"; return; }
    zcat "$1/$href" | awk '!done && match($0, /packages="[0-9]+"/) { print substr($0, RSTART + 10, RLENGTH - 11); done = 1 }'
}
check_primary() { # KEY REPO_DIR EXPECTED
    local got
    got=$(primary_count "$2")
    [[ "$got" == "$3" ]] || die "$1: primary.xml.gz in $2 says packages=\"$got\", expected $3"
}
check_report() { # KEY OUT ADDED: quarry's report line for the root
    grep -q ": $3 added, 0 removed, 0 rejected," "$2" || die "$1: quarry reported $(cat "$2"), expected $3 added"
}
check_sqlite() { # KEY REPO_DIR yes|no
    local got=no
    compgen -G "$2/repodata/*primary.sqlite*" > /dev/null && got=yes
    [[ "$got" == "$3" ]] || die "$1: sqlite databases present: $got, expected $3"
}
# Package names, sorted, without the "+1" package.
names_deb() { sed -n 's/^Package: //p' "$1" | grep -vx "quarry-many-$m" | sort; }
names_rpm() {
    local href
    href=$(primary_href "$1")
    zcat "$1/$href" | grep -o '<name>[^<]*</name>' | sed 's/<[^>]*>//g' | grep -vx "quarry-many-$m" | sort
}
same_names() { # WHAT LIST_A LIST_B: the two name lists are the same N names
    [[ "$2" == "$3" ]] || die "$1 list different packages"
    (($(wc -l <<< "$2") == n)) || die "$1: $(wc -l <<< "$2") names, expected $n"
}

# --- the rounds ------------------------------------------------------------------------------
deb_rel=1-linux/packages/deb
rpm_rel=1-linux/packages/rpm/x86_64
packages_file=dists/stable/main/binary-amd64/Packages
# Quarry is named the repo root, as apt-ftparchive and createrepo_c are named their directory;
# DISCOVER=1 lets it find the root itself (one more listing of the whole store first).
if [[ "${DISCOVER:-0}" == 1 ]]; then
    deb_root=() rpm_root=() qargs=""
else
    deb_root=(--prefix "$deb_rel/") rpm_root=(--prefix "$rpm_rel/") qargs=" --prefix ROOT"
fi

deb_round() {
    local round=$1 s r
    # Quarry.
    s=$(fresh q-deb deb); r=$s/$deb_rel
    run_timed deb.quarry "$s" "$work/logs/q-deb.out" "$quarry" index "$s" "${deb_root[@]}"
    record deb.quarry
    check_report deb.quarry "$work/logs/q-deb.out" "$n"; check_packages deb.quarry "$r/$packages_file" "$n"
    cp "$extra_deb" "$r/pool/main/"
    run_timed deb+1.quarry "$s" "$work/logs/q-deb.out" "$quarry" index "$s" "${deb_root[@]}"
    record deb+1.quarry
    check_report deb+1.quarry "$work/logs/q-deb.out" 1; check_packages deb+1.quarry "$r/$packages_file" "$m"

    # apt-ftparchive, no cache: the "+1" run rereads everything.
    s=$(fresh aft deb); r=$s/$deb_rel
    run_timed deb.aft "$r" "$r/Packages" apt-ftparchive packages pool/main
    record deb.aft; check_packages deb.aft "$r/Packages" "$n"
    same_names "apt-ftparchive and quarry" "$(names_deb "$r/Packages")" "$(names_deb "$work/run/q-deb/$deb_rel/$packages_file")"
    cp "$extra_deb" "$r/pool/main/"
    run_timed deb+1.aft "$r" "$r/Packages" apt-ftparchive packages pool/main
    record deb+1.aft; check_packages deb+1.aft "$r/Packages" "$m"

    # apt-ftparchive with a cache db: cold (creates it), then warm.
    s=$(fresh aftdb deb); r=$s/$deb_rel
    run_timed deb.aftdb "$r" "$r/Packages" apt-ftparchive --db cache.db packages pool/main
    record deb.aftdb; check_packages deb.aftdb "$r/Packages" "$n"
    cp "$extra_deb" "$r/pool/main/"
    run_timed deb+1.aftdb "$r" "$r/Packages" apt-ftparchive --db cache.db packages pool/main
    record deb+1.aftdb; check_packages deb+1.aftdb "$r/Packages" "$m"

    # dpkg-scanpackages (slow: only SCAN_RUNS rounds).
    if ((round <= scan_runs)); then
        s=$(fresh dps deb); r=$s/$deb_rel
        run_timed deb.dps "$r" "$r/Packages" dpkg-scanpackages --multiversion pool/main /dev/null
        record deb.dps; check_packages deb.dps "$r/Packages" "$n"
        same_names "dpkg-scanpackages and apt-ftparchive" "$(names_deb "$r/Packages")" "$(names_deb "$work/run/aft/$deb_rel/Packages")"
    fi
}

rpm_round() {
    local s r
    # Quarry.
    s=$(fresh q-rpm rpm); r=$s/$rpm_rel
    run_timed rpm.quarry "$s" "$work/logs/q-rpm.out" "$quarry" index "$s" "${rpm_root[@]}"
    record rpm.quarry
    check_report rpm.quarry "$work/logs/q-rpm.out" "$n"; check_primary rpm.quarry "$r" "$n"
    cp "$extra_rpm" "$r/"
    run_timed rpm+1.quarry "$s" "$work/logs/q-rpm.out" "$quarry" index "$s" "${rpm_root[@]}"
    record rpm+1.quarry
    check_report rpm+1.quarry "$work/logs/q-rpm.out" 1; check_primary rpm+1.quarry "$r" "$m"

    # createrepo_c, default (xml + sqlite), then --update.
    s=$(fresh crc rpm); r=$s/$rpm_rel
    run_timed rpm.crc "$r" "$work/logs/crc.out" createrepo_c "$r"
    record rpm.crc; check_primary rpm.crc "$r" "$n"; check_sqlite rpm.crc "$r" yes
    same_names "createrepo_c and quarry" "$(names_rpm "$r")" "$(names_rpm "$work/run/q-rpm/$rpm_rel")"
    cp "$extra_rpm" "$r/"
    run_timed rpm+1.crc "$r" "$work/logs/crc.out" createrepo_c --update "$r"
    record rpm+1.crc; check_primary rpm+1.crc "$r" "$m"; check_sqlite rpm+1.crc "$r" yes

    # createrepo_c --no-database (xml only, like Quarry), then --update --no-database.
    s=$(fresh crcnd rpm); r=$s/$rpm_rel
    run_timed rpm.crcnd "$r" "$work/logs/crcnd.out" createrepo_c --no-database "$r"
    record rpm.crcnd; check_primary rpm.crcnd "$r" "$n"; check_sqlite rpm.crcnd "$r" no
    cp "$extra_rpm" "$r/"
    run_timed rpm+1.crcnd "$r" "$work/logs/crcnd.out" createrepo_c --update --no-database "$r"
    record rpm+1.crcnd; check_primary rpm+1.crcnd "$r" "$m"; check_sqlite rpm+1.crcnd "$r" no
}

log "N = $n; $runs rounds (dpkg-scanpackages in $scan_runs); each round runs every tool once"
for round in $(seq 1 "$runs"); do
    log "round $round/$runs: debs"
    deb_round "$round"
    log "round $round/$runs: rpms"
    rpm_round
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

# --- summary ---------------------------------------------------------------------------------
ratio() { awk -v a="${best[$1]}" -v b="${best[$2]}" 'BEGIN { r = a / b; printf(r >= 100 ? "%.0f" : r >= 10 ? "%.1f" : "%.2f", r) }'; }
row() { # KEY COMMAND NOTES
    local k=$1
    [[ -n "${best[$k]:-}" ]] || return 0 # not run (SCAN_RUNS=0)
    printf '| %s | %s | %s | %s | %s | %s%s |\n' "$2" "${best[$k]}" "${all_runs[$k]}" "${best_cpu[$k]}" "${best_other[$k]}" "$3" "${best_ops[$k]}"
}
cmp() { # LABEL OTHER_KEY QUARRY_KEY
    [[ -n "${best[$2]:-}" ]] || return 0 # not run (SCAN_RUNS=0)
    printf '| %s | %s | %s | **%s** |\n' "$1" "${best[$2]}" "${best[$3]}" "$(ratio "$2" "$3")"
}

echo '```'
cat "$work/machine.txt"
echo "load average at end: $load_end"
echo '```'
echo
echo "N = $n packages of each kind (tests/fixtures/native/build.sh --many $m; the last held back as" \
    "the \"+1\"): $n debs ($deb_kib KiB), $n rpms ($rpm_kib KiB)."
echo "Wall seconds, best of $runs rounds (dpkg-scanpackages: $scan_runs). Ratio = other tool / Quarry, so > 1 means Quarry is faster."
echo
echo "| comparison ($n packages) | other (s) | Quarry (s) | ratio |"
echo '| --- | ---: | ---: | ---: |'
cmp "debs from scratch: \`apt-ftparchive packages\` (no --db) vs \`quarry index\`" deb.aft deb.quarry
cmp "debs from scratch: \`apt-ftparchive --db\` (cold) vs \`quarry index\`" deb.aftdb deb.quarry
cmp "debs from scratch: \`dpkg-scanpackages --multiversion\` vs \`quarry index\`" deb.dps deb.quarry
cmp "debs +1: \`apt-ftparchive packages\` (no --db, rereads all) vs \`quarry index\`" deb+1.aft deb+1.quarry
cmp "debs +1: \`apt-ftparchive --db\` (warm) vs \`quarry index\`" deb+1.aftdb deb+1.quarry
cmp "rpms from scratch: \`createrepo_c\` (default: xml + sqlite) vs \`quarry index\`" rpm.crc rpm.quarry
cmp "rpms from scratch: \`createrepo_c --no-database\` (xml only) vs \`quarry index\`" rpm.crcnd rpm.quarry
cmp "rpms +1: \`createrepo_c --update\` (xml + sqlite) vs \`quarry index\`" rpm+1.crc rpm+1.quarry
cmp "rpms +1: \`createrepo_c --update --no-database\` vs \`quarry index\`" rpm+1.crcnd rpm+1.quarry
echo
echo '| measurement | best s | runs (s) | CPU s (best run) | other load (cores) | writes |'
echo '| --- | ---: | --- | ---: | ---: | --- |'
row deb.quarry "debs: \`quarry index STORE$qargs\`, from scratch" "Packages, .gz, .xz, Release, by-hash, state"
row deb.aft "debs: \`apt-ftparchive packages pool/main > Packages\`" "Packages"
row deb.aftdb "debs: \`apt-ftparchive --db cache.db packages pool/main > Packages\` (cold)" "Packages, cache.db"
row deb.dps "debs: \`dpkg-scanpackages --multiversion pool/main /dev/null > Packages\`" "Packages"
row deb+1.quarry "debs +1: \`quarry index STORE$qargs\` (state present)" "reads 1 .deb; rewrites all outputs"
row deb+1.aft "debs +1: \`apt-ftparchive packages pool/main > Packages\`" "rereads all $m"
row deb+1.aftdb "debs +1: \`apt-ftparchive --db cache.db packages pool/main > Packages\` (warm)" "reads 1 .deb, stats all"
row rpm.quarry "rpms: \`quarry index STORE$qargs\`, from scratch" "primary, filelists, other (.xml.gz), repomd.xml, state"
row rpm.crc "rpms: \`createrepo_c DIR\` (0.17 default)" "the same xml + 3 sqlite dbs (.bz2)"
row rpm.crcnd "rpms: \`createrepo_c --no-database DIR\`" "the same xml"
row rpm+1.quarry "rpms +1: \`quarry index STORE$qargs\` (state present)" "reads 1 .rpm; rewrites the xml"
row rpm+1.crc "rpms +1: \`createrepo_c --update DIR\`" "reuses old xml entries; xml + sqlite"
row rpm+1.crcnd "rpms +1: \`createrepo_c --update --no-database DIR\`" "reuses old xml entries; xml"
echo
echo "Checks passed: every run's output lists the expected packages (\`^Package:\` stanzas, primary.xml.gz" \
    "\`packages=\"…\"\`, Quarry's \"K added, 0 removed, 0 rejected\"); Quarry, apt-ftparchive and" \
    "dpkg-scanpackages list the same package names, as do Quarry and createrepo_c."
