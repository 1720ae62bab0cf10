#!/usr/bin/env bash
# The cost of TLS per request: one prebuilt pip project page served by `quarry serve` (release)
# over plain HTTP and over TLS (--tls-cert/--tls-key, a P-256 certificate made here with
# openssl), the two servers on the same store and loopback, measured by the same load generator
# (wrk) one after the other, RUNS times alternating.
#
#   bench/serve_tls.sh                         # 30 wheels, 16 connections, 10 s per server and mode
#   CONNECTIONS=64 SECONDS_EACH=20 bench/serve_tls.sh
#   QUARRY=/path/to/quarry bench/serve_tls.sh  # a prebuilt binary instead of building one
#   RUNS=5 bench/serve_tls.sh                  # runs alternating the two servers (default 3)
#
# Two modes: `kept` (keep-alive: the handshake is paid once per connection, the figure the goal
# is about: TLS within 1.3x of plain HTTP per request) and `new` (`Connection: close`: a TCP
# connection, and over TLS a full handshake, per request). Per run: requests/s of each server,
# the time per request over TLS against plain HTTP (plain requests/s / TLS requests/s), and the
# CPU time each server spent per request (user + system, from /proc), a figure less sensitive to
# other load on the machine. Quarry runs with RUST_LOG=warn (no access log line per request).
#
# Needs: wrk, openssl, python3, curl (apt-get install wrk openssl).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$repo/bench/lib.sh"
bench_setup serve_tls
wheels=${WHEELS:-30}
connections=${CONNECTIONS:-16}
seconds=${SECONDS_EACH:-10}
threads=${THREADS:-1}
for tool in wrk openssl python3 curl; do command -v "$tool" >/dev/null || die "$tool is missing (apt-get install wrk openssl)"; done
if [[ -n "${QUARRY:-}" ]]; then
    cp "$QUARRY" "$work/quarry"
    quarry="$work/quarry"
    quarry_rev="given binary"
else
    bench_quarry
fi

store="$work/store"
log "writing $wheels wheels of one project into $store"
python3 - "$store/1-linux/python" "$wheels" <<'PY'
import io, os, sys, zipfile
root, count = sys.argv[1], int(sys.argv[2])
os.makedirs(root, exist_ok=True)
for i in range(count):
    version = f"1.{i}"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        meta = f"Metadata-Version: 2.1\nName: demo\nVersion: {version}\nRequires-Dist: numpy>=1\n"
        for name, data in [("demo/__init__.py", ""), (f"demo-{version}.dist-info/METADATA", meta),
                           (f"demo-{version}.dist-info/WHEEL", "Wheel-Version: 1.0\nTag: py3-none-any\n"),
                           (f"demo-{version}.dist-info/RECORD", "")]:
            z.writestr(zipfile.ZipInfo(name, (2025, 1, 1, 0, 0, 0)), data)
    open(os.path.join(root, f"demo-{version}-py3-none-any.whl"), "wb").write(buf.getvalue())
PY
"$quarry" index "$store" >/dev/null
page="1-linux/python/simple/demo/index.html"
[[ -f "$store/$page" ]] || die "no prebuilt page at $page"

log "making a self-signed P-256 certificate for 127.0.0.1"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=quarry bench" \
    -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null

RUST_LOG=warn "$quarry" serve --store "$store" --addr 127.0.0.1:0 >"$work/url-plain" 2>"$work/plain.log" &
plain=$!
RUST_LOG=warn "$quarry" serve --store "$store" --addr 127.0.0.1:0 \
    --tls-cert "$work/cert.pem" --tls-key "$work/key.pem" >"$work/url-tls" 2>"$work/tls.log" &
tls=$!
trap 'kill $plain $tls 2>/dev/null; bench_cleanup' EXIT
for _ in $(seq 1 100); do [[ -s "$work/url-plain" && -s "$work/url-tls" ]] && break; sleep 0.1; done
plain_url=$(head -1 "$work/url-plain")
tls_url=$(head -1 "$work/url-tls")
[[ "$tls_url" == https://* ]] || die "the TLS server announced $tls_url"
curl -fsS -o "$work/from-plain" "$plain_url$page" || die "plain HTTP does not serve $page"
curl -fsS --cacert "$work/cert.pem" -o "$work/from-tls" "$tls_url$page" || die "TLS does not serve $page"
cmp -s "$work/from-plain" "$work/from-tls" || die "the two servers return different bytes"

# CPU seconds (user + system) of a process, from /proc/PID/stat.
cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }

# One wrk run against URL (extra wrk arguments after PID) while measuring PID's CPU:
# "requests/s cpu-µs-per-request".
measure() {
    local url=$1 pid=$2
    shift 2
    local before after out
    before=$(cpu_of "$pid")
    out=$(wrk -t"$threads" -c"$connections" -d"${seconds}s" "$@" "$url")
    after=$(cpu_of "$pid")
    awk -v b="$before" -v a="$after" '
        / requests in / { n = $1 }
        /^Requests\/sec:/ { rps = $2 }
        END { printf "%s %.1f\n", rps, (a - b) * 1e6 / n }' <<<"$out"
}

runs=${RUNS:-3}
echo "date: $(date -u +%FT%TZ)"
echo "quarry: $("$quarry" --version) (git $quarry_rev); $(wrk --version 2>&1 | head -1 | cut -d' ' -f1-2); $(openssl version | cut -d' ' -f1-2)"
bench_host
echo "page: $page, $(wc -c <"$store/$page") bytes; wrk -t$threads -c$connections -d${seconds}s; RUST_LOG=warn; certificate: P-256 self-signed"
echo
echo "| run | mode | load | plain requests/s | TLS requests/s | TLS time per request / plain | plain CPU µs/request | TLS CPU µs/request |"
echo "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"
declare -A ratios
for run in $(seq 1 "$runs"); do
    for mode in kept new; do
        extra=()
        [[ "$mode" == new ]] && extra=(-H "Connection: close")
        load=$(cut -d' ' -f1 /proc/loadavg)
        read -r p_rps p_cpu <<<"$(measure "$plain_url$page" "$plain" "${extra[@]}")"
        read -r t_rps t_cpu <<<"$(measure "$tls_url$page" "$tls" "${extra[@]}")"
        ratio=$(echo "$p_rps / $t_rps" | bc -l)
        ratios[$mode]+="$ratio "
        printf '| %s | %s | %s | %s | %s | %.2f | %s | %s |\n' "$run" "$mode" "$load" "$p_rps" "$t_rps" "$ratio" "$p_cpu" "$t_cpu"
    done
done
echo
for mode in kept new; do
    sorted=$(printf '%s\n' ${ratios[$mode]} | sort -g)
    printf 'TLS / plain time per request, %s connections: median %.2f, best %.2f%s\n' "$mode" \
        "$(sed -n "$(( (runs + 1) / 2 ))p" <<<"$sorted")" "$(head -1 <<<"$sorted")" \
        "$([[ $mode == kept ]] && echo ' (goal <= 1.3)')"
done
