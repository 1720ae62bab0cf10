#!/usr/bin/env bash
# Requests per second for a prebuilt pip project page over keep-alive connections:
# `quarry serve` (release) against nginx serving the same file from the same directory, both on
# loopback, measured by the same load generator (wrk, Debian's `wrk`), one after the other.
#
#   bench/serve.sh                          # 30 wheels, 16 connections, 10 s per server
#   CONNECTIONS=64 SECONDS_EACH=20 bench/serve.sh
#   QUARRY=/path/to/quarry bench/serve.sh   # a prebuilt binary instead of building one
#   RUNS=5 bench/serve.sh                   # runs alternating the two servers (default 3)
#   RUST_LOG=warn bench/serve.sh            # quarry without its access log (nginx has none)
#   NGINX_ACCESS_LOG=1 bench/serve.sh       # both servers write an access log line per request
#
# Needs: nginx, wrk (apt-get install nginx wrk), python3. nginx runs as the current user with
# its own config and temp paths under the scratch directory; nothing is installed or started
# system-wide. The ratio is quarry / nginx (goal ≥ 0.8), per run, with its median and best; the
# CPU time each server spent per request (user + system, from /proc) is beside it, a figure
# less sensitive than requests/s to other load on the machine.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$repo/bench/lib.sh"
bench_setup serve
wheels=${WHEELS:-30}
connections=${CONNECTIONS:-16}
seconds=${SECONDS_EACH:-10}
threads=${THREADS:-1}
for tool in nginx wrk python3 curl; do command -v "$tool" >/dev/null || die "$tool is missing (apt-get install nginx wrk)"; done
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

# nginx: a private config, pid, logs and temp paths; one worker per core, as its default.
# Run as root, nginx hands requests to workers running as nobody: they must read the store.
chmod -R a+rX "$work"
mkdir -p "$work/nginx"
nginx_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
if [[ "${NGINX_ACCESS_LOG:-0}" == 1 ]]; then
    nginx_access_log="access_log $work/nginx/access.log;"
else
    nginx_access_log="access_log off;"
fi
cat >"$work/nginx/nginx.conf" <<CONF
worker_processes auto;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections 1024; }
http {
    $nginx_access_log
    client_body_temp_path $work/nginx/body;
    proxy_temp_path $work/nginx/proxy;
    fastcgi_temp_path $work/nginx/fastcgi;
    uwsgi_temp_path $work/nginx/uwsgi;
    scgi_temp_path $work/nginx/scgi;
    types { text/html html; }
    sendfile on;
    keepalive_requests 1000000;
    server {
        listen 127.0.0.1:$nginx_port;
        root $store;
    }
}
CONF
nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" -g 'daemon off;' 2>"$work/nginx/stderr" &
nginx_pid=$!
"$quarry" serve --store "$store" --addr 127.0.0.1:0 >"$work/url" 2>"$work/serve.log" &
server=$!
trap 'kill $server $nginx_pid 2>/dev/null; bench_cleanup' EXIT
for _ in $(seq 1 100); do [[ -s "$work/url" ]] && break; sleep 0.1; done
url=$(head -1 "$work/url")
url=${url%/}
nginx_url="http://127.0.0.1:$nginx_port"
for _ in $(seq 1 50); do curl -fsS -o /dev/null "$nginx_url/$page" 2>/dev/null && break; sleep 0.1; done
curl -fsS -o "$work/from-nginx" "$nginx_url/$page" || die "nginx does not serve $page"
curl -fsS -o "$work/from-quarry" "$url/$page" || die "quarry does not serve $page"
cmp -s "$work/from-nginx" "$work/from-quarry" || die "the two servers return different bytes"

# CPU seconds (user + system) of processes, from /proc/PID/stat.
cpu_of() {
    local total=0 pid
    for pid in "$@"; do
        total=$(awk -v t="$total" -v hz="$(getconf CLK_TCK)" '{ print t + ($14 + $15) / hz }' "/proc/$pid/stat")
    done
    echo "$total"
}
# nginx's master and workers.
nginx_pids() { echo "$nginx_pid $(pgrep -P "$nginx_pid" | tr '\n' ' ')"; }

# One wrk run against URL while measuring the CPU of PIDS: "requests/s cpu-µs-per-request".
measure() {
    local url=$1
    shift
    local before after out
    before=$(cpu_of "$@")
    out=$(wrk -t"$threads" -c"$connections" -d"${seconds}s" "$url")
    after=$(cpu_of "$@")
    awk -v b="$before" -v a="$after" '
        / requests in / { n = $1 }
        /^Requests\/sec:/ { rps = $2 }
        END { printf "%s %.1f\n", rps, (a - b) * 1e6 / n }' <<<"$out"
}

# RUNS alternating runs of each server; per run the ratio, then the median and best.
runs=${RUNS:-3}
echo "date: $(date -u +%FT%TZ)"
echo "quarry: $("$quarry" --version) (git $quarry_rev); $(nginx -v 2>&1); $(wrk --version 2>&1 | head -1 | cut -d' ' -f1-2)"
bench_host
echo "page: $page, $(wc -c <"$store/$page") bytes; wrk -t$threads -c$connections -d${seconds}s, keep-alive; quarry's access log ${RUST_LOG:-on (info)}; nginx $nginx_access_log"
echo
echo "| run | load | quarry requests/s | nginx requests/s | ratio | quarry CPU µs/request | nginx CPU µs/request |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
ratios=()
for run in $(seq 1 "$runs"); do
    load=$(cut -d' ' -f1 /proc/loadavg)
    # shellcheck disable=SC2046  # the pids are words
    read -r q_rps q_cpu <<<"$(measure "$url/$page" "$server")"
    # shellcheck disable=SC2046
    read -r n_rps n_cpu <<<"$(measure "$nginx_url/$page" $(nginx_pids))"
    ratio=$(echo "$q_rps / $n_rps" | bc -l)
    ratios+=("$ratio")
    printf '| %s | %s | %s | %s | %.2f | %s | %s |\n' "$run" "$load" "$q_rps" "$n_rps" "$ratio" "$q_cpu" "$n_cpu"
done
sorted=$(printf '%s\n' "${ratios[@]}" | sort -g)
printf '\nratio quarry / nginx: median %.2f, best %.2f (goal >= 0.8)\n' \
    "$(sed -n "$(( (runs + 1) / 2 ))p" <<<"$sorted")" "$(tail -1 <<<"$sorted")"
