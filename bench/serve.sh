#!/usr/bin/env bash
# Requests per second for a prebuilt pip project page over keep-alive connections:
# `quarry serve` (release) against nginx serving the same file from the same directory, both on
# loopback, measured by the same load generator (wrk, Debian's `wrk`), one after the other.
#
#   bench/serve.sh                          # 30 wheels, 16 connections, 10 s per server
#   CONNECTIONS=64 SECONDS_EACH=20 bench/serve.sh
#   QUARRY=/path/to/quarry bench/serve.sh   # a prebuilt binary instead of building one
#
# Needs: nginx, wrk (apt-get install nginx wrk), python3. nginx runs as the current user with
# its own config and temp paths under the scratch directory; nothing is installed or started
# system-wide. The ratio is quarry / nginx (goal ≥ 0.8).
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
cat >"$work/nginx/nginx.conf" <<CONF
worker_processes auto;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections 1024; }
http {
    access_log off;
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

# requests/s of wrk against one URL
rps() {
    wrk -t"$threads" -c"$connections" -d"${seconds}s" "$1" | awk '/^Requests\/sec:/ { print $2 }'
}
quarry_rps=$(rps "$url/$page")
nginx_rps=$(rps "$nginx_url/$page")

echo "date: $(date -u +%FT%TZ)"
echo "quarry: $("$quarry" --version) (git $quarry_rev); $(nginx -v 2>&1); $(wrk --version 2>&1 | head -1 | cut -d' ' -f1-2)"
bench_host
echo "page: $page, $(wc -c <"$store/$page") bytes; wrk -t$threads -c$connections -d${seconds}s, keep-alive"
echo
echo "| server | requests/s | ratio to nginx |"
echo "| --- | ---: | ---: |"
printf '| quarry serve | %s | %.2f |\n' "$quarry_rps" "$(echo "$quarry_rps / $nginx_rps" | bc -l)"
printf '| nginx | %s | 1.00 |\n' "$nginx_rps"
