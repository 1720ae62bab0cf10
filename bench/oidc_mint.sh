#!/usr/bin/env bash
# The cost of a trusted-publishing mint with the issuer's keys cached: `POST /_/oidc/mint-token`
# (an RS256 OIDC token verified, matched against a [[trusted_publisher]] rule, an upload token
# minted and held) against a plain authenticated request (a private server's `GET` of a small
# stored file with a Bearer token) as baseline, on one `quarry serve` (release, plain HTTP on
# loopback), measured by the same load generator (wrk) one after the other, RUNS times.
# The stand-in issuer (bench/oidc_issuer.py: openssl key and signature) is asked once, for the
# keys; every mint after that verifies with the cached key.
#
#   bench/oidc_mint.sh                          # 4 connections, 10 s per kind, 3 runs
#   CONNECTIONS=1 SECONDS_EACH=20 RUNS=5 bench/oidc_mint.sh
#   QUARRY=/path/to/quarry bench/oidc_mint.sh   # a prebuilt binary instead of building one
#
# Per run: requests/s of each, the time per mint against the baseline's (baseline requests/s /
# mint requests/s), and the server's CPU time per request (user + system, from /proc). Note: at
# 10,000 tokens held (MAX_MINTED), each further mint first drops the one expiring first.
#
# Needs: wrk, openssl, python3, curl.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$repo/bench/lib.sh"
bench_setup oidc_mint
connections=${CONNECTIONS:-4}
seconds=${SECONDS_EACH:-10}
threads=${THREADS:-1}
runs=${RUNS:-3}
for tool in wrk openssl python3 curl; do command -v "$tool" >/dev/null || die "$tool is missing (apt-get install wrk openssl)"; done
if [[ -n "${QUARRY:-}" ]]; then
    cp "$QUARRY" "$work/quarry"
    quarry="$work/quarry"
    quarry_rev="given binary"
else
    bench_quarry
fi

issuer_dir="$work/issuer"
mkdir -p "$issuer_dir"
python3 "$repo/bench/oidc_issuer.py" serve "$issuer_dir" >"$work/issuer-url" &
issuer_pid=$!
trap 'kill $issuer_pid ${server:-} 2>/dev/null; bench_cleanup' EXIT
for _ in $(seq 1 100); do [[ -s "$work/issuer-url" ]] && break; sleep 0.1; done
issuer=$(head -1 "$work/issuer-url")
python3 "$repo/bench/oidc_issuer.py" make "$issuer_dir" "$issuer" quarry-bench 4242
token=$(cat "$issuer_dir/token.jwt")

store="$work/store"
mkdir -p "$store/1-linux"
printf 'hello\n' >"$store/1-linux/note.txt"
cat >"$work/quarry.toml" <<TOML
private = true
oidc_audience = "quarry-bench"

[[tokens]]
token = "bench-static-token"

[[trusted_publisher]]
issuer = "$issuer"
repository = "ROCm/TheRock"
workflow = "release.yml"
ref = "refs/heads/main"
prefix = "{run_id}-"
TOML
RUST_LOG=warn "$quarry" serve --store "$store" --addr 127.0.0.1:0 --config "$work/quarry.toml" >"$work/url" 2>"$work/serve.log" &
server=$!
for _ in $(seq 1 100); do [[ -s "$work/url" ]] && break; sleep 0.1; done
url=$(head -1 "$work/url")
curl -fsS -H "Authorization: Bearer bench-static-token" -o /dev/null "${url}1-linux/note.txt" || die "the baseline request fails"
minted=$(curl -fsS -H 'Content-Type: application/json' --data "{\"token\": \"$token\"}" "${url}_/oidc/mint-token")
[[ "$minted" == *'"success":true'* ]] || die "minting fails: $minted"

cat >"$work/mint.lua" <<LUA
wrk.method = "POST"
wrk.body = '{"token": "$token"}'
wrk.headers["Content-Type"] = "application/json"
LUA

cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }

# One wrk run (arguments after the URL) measuring the server's CPU: "requests/s cpu-µs-per-request".
measure() {
    local target=$1
    shift
    local before after out
    before=$(cpu_of "$server")
    out=$(wrk -t"$threads" -c"$connections" -d"${seconds}s" "$@" "$target")
    after=$(cpu_of "$server")
    if grep -q "Non-2xx" <<<"$out"; then die "refused requests during the run: $out"; fi
    awk -v b="$before" -v a="$after" '
        / requests in / { n = $1 }
        /^Requests\/sec:/ { rps = $2 }
        END { printf "%s %.1f\n", rps, (a - b) * 1e6 / n }' <<<"$out"
}

echo "date: $(date -u +%FT%TZ)"
echo "quarry: $("$quarry" --version) (git $quarry_rev); $(wrk --version 2>&1 | head -1 | cut -d' ' -f1-2); $(openssl version | cut -d' ' -f1-2)"
bench_host
echo "wrk -t$threads -c$connections -d${seconds}s; RUST_LOG=warn; baseline: GET of a 6-byte file with a Bearer token (private server); mint: POST /_/oidc/mint-token, RSA-2048 token, keys cached"
echo
echo "| run | load | baseline requests/s | mint requests/s | mint time / baseline | baseline CPU µs/request | mint CPU µs/request |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
ratios=()
for run in $(seq 1 "$runs"); do
    load=$(cut -d' ' -f1 /proc/loadavg)
    read -r b_rps b_cpu <<<"$(measure "${url}1-linux/note.txt" -H "Authorization: Bearer bench-static-token")"
    read -r m_rps m_cpu <<<"$(measure "${url}_/oidc/mint-token" -s "$work/mint.lua")"
    ratio=$(echo "$b_rps / $m_rps" | bc -l)
    ratios+=("$ratio")
    printf '| %s | %s | %s | %s | %.2f | %s | %s |\n' "$run" "$load" "$b_rps" "$m_rps" "$ratio" "$b_cpu" "$m_cpu"
done
echo
sorted=$(printf '%s\n' "${ratios[@]}" | sort -g)
printf 'mint / baseline time per request: median %.2f, best %.2f\n' \
    "$(sed -n "$(( (runs + 1) / 2 ))p" <<<"$sorted")" "$(head -1 <<<"$sorted")"
