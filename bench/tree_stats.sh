#!/usr/bin/env bash
# The shape of the shipped code at one revision: lines per crate, the largest crate's share,
# functions over 60 lines, and the pairs of duplicated lines the `duplicates` tool finds. Reads
# text only (no cargo, no build), so it is cheap enough to run on any two revisions and compare.
#
#   bench/tree_stats.sh                 # HEAD of this checkout
#   bench/tree_stats.sh 4009477         # any revision git can name
#   DUP_MOST=20 DUP_SECONDS=60 bench/tree_stats.sh HEAD
#
# The revision is exported with `git archive` into a scratch directory (removed at exit unless
# BENCH_KEEP=1); the working tree is not touched. Then a copy of the shipped Rust is made:
#
#   crates:    every folder with a Cargo.toml that has a [package], except tests/, fuzz/, bench/
#   counted:   the crates' `*.rs` files
#   excluded:  tests/, fuzz/ and bench/ whole; inside a crate any tests/, benches/ or examples/
#              folder; files named tests.rs or *_tests.rs (test modules kept in their own file);
#              every item under #[cfg(test)] or #[cfg(all(test, ...))] (a `mod tests { ... }`,
#              a test-only fn or use), blanked line by line so line numbers stay those of the
#              revision. Items under #[cfg(any(test, feature = ...))] ship, and count.
#   lines:     non-blank lines; code: of those, the ones that are not only a `//` comment.
#
# A function's length runs from its `fn` line to the closing brace at the same indentation
# (rustfmt formats every crate, so that brace is where the body ends); bodiless trait methods
# and one-line functions are not counted. Duplicates: `duplicates --repo COPY` over the shipped
# copy (identical or same-shape runs of 6 or more lines; blanked test lines are passed over).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
rev=${1:-HEAD}
dup_most=${DUP_MOST:-10}
dup_seconds=${DUP_SECONDS:-60}
long=${LONG_FN:-60}

die() { printf '[tree_stats] FAILED: %s\n' "$*" >&2; exit 1; }
for tool in git tar awk sort; do command -v "$tool" >/dev/null || die "$tool is missing"; done
commit=$(git -C "$repo" rev-parse --verify --quiet "$rev^{commit}") || die "no commit named $rev in $repo"

work="$(mktemp -d "${TMPDIR:-/tmp}/quarry-tree_stats.XXXXXX")"
# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() { if [[ "${BENCH_KEEP:-0}" == 1 ]]; then echo "kept $work" >&2; else rm -rf "$work"; fi; }
trap cleanup EXIT
mkdir -p "$work/tree" "$work/shipped"
git -C "$repo" archive --format=tar "$commit" | tar -x -C "$work/tree"

# Crates: folders holding a Cargo.toml with a [package] table, outside tests/, fuzz/, bench/.
crates=()
while IFS= read -r manifest; do
  dir=${manifest%/Cargo.toml}
  dir=${dir#./}
  case "$dir" in tests | tests/* | fuzz | fuzz/* | bench | bench/* | .) continue ;; esac
  grep -q '^\[package\]' "$work/tree/$manifest" || continue
  crates+=("$dir")
done < <(cd "$work/tree" && find . -name Cargo.toml -not -path '*/target/*' | sort)
[[ ${#crates[@]} -gt 0 ]] || die "no crate found at $rev"

# Blank the test-only items of one file, keeping its line count.
strip_tests() {
  awk '
    function indent_of(s) { match(s, /^ */); return RLENGTH }
    skip == 1 {
      print ""
      rest = substr($0, ind + 1)
      if (indent_of($0) == ind && rest ~ /^[\]\)}]+[;,]?$/) skip = 0
      next
    }
    pending == 1 {
      print ""
      if ($0 ~ /^ *#\[/) next                          # more attributes on the same item
      pending = 0
      line = $0; sub(/ *\/\/.*$/, "", line)
      if (line ~ /;$/ || (line ~ /\{/ && line ~ /}$/)) next   # a one-line item
      ind = indent_of($0); skip = 1
      next
    }
    /^ *#\[cfg\((test|all\(test,)/ { pending = 1; print ""; next }
    { print }
  ' "$1"
}

# The shipped copy, and per file its crate.
: >"$work/files"
for crate in "${crates[@]}"; do
  while IFS= read -r file; do
    rel=${file#./}
    case "/$rel" in */tests/* | */benches/* | */examples/* | */target/*) continue ;; esac
    case "${rel##*/}" in tests.rs | *_tests.rs) continue ;; esac
    mkdir -p "$work/shipped/$(dirname "$rel")"
    strip_tests "$work/tree/$rel" >"$work/shipped/$rel"
    printf '%s\t%s\n' "$crate" "$rel" >>"$work/files"
  done < <(cd "$work/tree" && find "./$crate" -name '*.rs' -type f | sort)
done

subject=$(git -C "$repo" log -1 --format='%h %s' "$commit" | cut -c1-100)
echo "tree_stats $rev = $subject"
echo "shipped Rust only: tests/, fuzz/, bench/, crate tests/ benches/ examples/, tests.rs, *_tests.rs and #[cfg(test)] items left out"
echo

# Lines per crate.
while IFS=$'\t' read -r crate rel; do
  awk -v crate="$crate" '
    /[^ \t]/ { lines++; if ($0 !~ /^[ \t]*\/\//) code++ }
    END { printf "%s\t%d\t%d\n", crate, lines, code }
  ' "$work/shipped/$rel"
done <"$work/files" >"$work/per_file"
awk -F'\t' '
  { files[$1]++; lines[$1] += $2; code[$1] += $3; total += $2; tcode += $3; if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
  END {
    printf "%-16s %6s %8s %8s %7s\n", "crate", "files", "lines", "code", "share"
    for (i = 1; i <= n; i++) {
      c = order[i]
      printf "%-16s %6d %8d %8d %6.1f%%\n", c, files[c], lines[c], code[c], 100 * lines[c] / total
      if (lines[c] > best) { best = lines[c]; bestc = c; bestcode = code[c] }
    }
    printf "%-16s %6s %8d %8d\n", "total", "", total, tcode
    printf "\nlargest crate: %s, %d of %d lines (%.1f%%; code %.1f%%)\n", bestc, best, total, 100 * best / total, 100 * bestcode / tcode
  }
' "$work/per_file"

# Functions and their lengths.
while IFS=$'\t' read -r crate rel; do
  awk -v crate="$crate" -v file="$rel" '
    function indent_of(s) { match(s, /^ */); return RLENGTH }
    { text[NR] = $0 }
    END {
      for (i = 1; i <= NR; i++) {
        if (text[i] !~ /^ *((pub(\([a-z:_ ]+\))?|const|async|unsafe|extern "[^"]*"|default) )*fn [A-Za-z_][A-Za-z0-9_]*/) continue
        name = substr(text[i], index(text[i], "fn ") + 3); sub(/[^A-Za-z0-9_].*$/, "", name)
        ind = indent_of(text[i])
        # Body or not: the first signature line ending in "{" or ";".
        body = 0
        for (k = i; k <= NR; k++) {
          s = text[k]; sub(/ *\/\/.*$/, "", s)
          if (k == i && s ~ /\{/ && s ~ /}$/) { body = -1; break }   # one line
          if (s ~ /\{$/) { body = 1; break }
          if (s ~ /;$/) break
        }
        if (body == -1) { printf "%s\t%s:%d\t%s\t1\n", crate, file, i, name; continue }
        if (body == 0) continue
        for (j = k; j <= NR; j++) {
          if (j > i && indent_of(text[j]) == ind && substr(text[j], ind + 1) == "}") break
        }
        if (j > NR) continue
        printf "%s\t%s:%d\t%s\t%d\n", crate, file, i, name, j - i + 1
      }
    }
  ' "$work/shipped/$rel"
done <"$work/files" >"$work/functions"
awk -F'\t' -v long="$long" '
  { all++; if ($4 > long) over++ }
  END { printf "\nfunctions over %d lines: %d of %d functions\n", long, over + 0, all }
' "$work/functions"
awk -F'\t' -v long="$long" '$4 > long { print $1 }' "$work/functions" | sort | uniq -c | sort -k1,1nr -k2 |
  awk '{ printf "%s%s %d", (NR == 1 ? "  by crate: " : ", "), $2, $1 } END { if (NR) printf "\n" }'
sort -t$'\t' -k4,4nr "$work/functions" | awk -F'\t' -v long="$long" '$4 > long && n++ < 10 { printf "  %4d  %s  %s\n", $4, $2, $3 }'

# Duplicates, when the tool is there.
echo
if command -v duplicates >/dev/null; then
  echo "duplicates (duplicates --repo <shipped copy> --most $dup_most --seconds $dup_seconds):"
  duplicates --repo "$work/shipped" --most "$dup_most" --seconds "$dup_seconds" | sed 's/^/  /'
else
  echo "duplicates: the duplicates tool is not on PATH (see /work/.library/duplicates); no pairs counted"
fi
