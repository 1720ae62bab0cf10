#!/usr/bin/env bash
# Latency of the run browser on a store with RUNS runs (default 1,000), each holding a pip root
# (3 wheels of one project, indexed), 10 stage artifact archives with sidecars, and a log.
# `quarry serve` (release) renders every browse page from the store on each request; the
# reference is the same server returning a stored page (the run's TheRock-style listing
# `index.html`, written by `quarry index`), i.e. what a static S3/CDN listing costs.
#
#   bench/browse.sh                  # 1,000 runs, 30 requests per page
#   RUNS=200 REQUESTS=10 bench/browse.sh
#
# Ratios are static / dynamic: how many times slower a rendered page is than a stored one.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$repo/bench/lib.sh"
bench_setup browse
runs=${RUNS:-1000}
requests=${REQUESTS:-30}
for tool in cargo python3 curl; do command -v "$tool" >/dev/null || die "$tool is missing"; done
bench_quarry

store="$work/store"
log "writing $runs runs into $store"
python3 - "$store" "$runs" <<'PY'
import hashlib, io, os, sys, zipfile
store, runs = sys.argv[1], int(sys.argv[2])
def wheel(version):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        meta = f"Metadata-Version: 2.1\nName: demo\nVersion: {version}\nRequires-Dist: numpy>=1\n"
        for name, data in [("demo/__init__.py", ""), ("demo-%s.dist-info/METADATA" % version, meta),
                           ("demo-%s.dist-info/WHEEL" % version, "Wheel-Version: 1.0\nTag: py3-none-any\n")]:
            info = zipfile.ZipInfo(name, (2025, 1, 1, 0, 0, 0))
            z.writestr(info, data)
        z.writestr(zipfile.ZipInfo("demo-%s.dist-info/RECORD" % version, (2025, 1, 1, 0, 0, 0)), "")
    return buf.getvalue()
wheels = {v: wheel(v) for v in ("1.0", "1.1", "2.0")}
for run in range(1, runs + 1):
    root = os.path.join(store, f"{run}-linux")
    os.makedirs(os.path.join(root, "python"), exist_ok=True)
    os.makedirs(os.path.join(root, "logs"), exist_ok=True)
    for v, data in wheels.items():
        open(os.path.join(root, "python", f"demo-{v}-py3-none-any.whl"), "wb").write(data)
    for i in range(10):
        name = f"art{i}_lib_generic.tar.zst"
        data = os.urandom(64)
        open(os.path.join(root, name), "wb").write(data)
        open(os.path.join(root, name + ".sha256sum"), "w").write(f"{hashlib.sha256(data).hexdigest()}  {name}\n")
    open(os.path.join(root, "logs", "build.log"), "w").write("ok\n")
PY
log "indexing ($runs pip roots and run listings)"
start=$(date +%s.%N)
"$quarry" index "$store" >/dev/null
index_seconds=$(echo "$(date +%s.%N) - $start" | bc)

"$quarry" serve --store "$store" --addr 127.0.0.1:0 >"$work/url" 2>"$work/serve.log" &
server=$!
trap 'kill $server 2>/dev/null; bench_cleanup' EXIT
for _ in $(seq 1 100); do [[ -s "$work/url" ]] && break; sleep 0.1; done
url=$(head -1 "$work/url")
mid=$((runs / 2))

# median and p95 of REQUESTS GETs, in milliseconds
measure() {
    local path=$1
    curl -fsS -o /dev/null "$url$path" || die "GET $path failed"
    for _ in $(seq 1 "$requests"); do
        curl -fsS -o /dev/null -w '%{time_total}\n' "$url$path"
    done | sort -n | awk '{ t[NR] = $1 * 1000 } END { printf "%.2f %.2f\n", t[int((NR + 1) / 2)], t[int(NR * 0.95 + 0.5)] }'
}

static=$(measure "$mid-linux/index.html")
static_median=${static% *}
echo "date: $(date -u +%FT%TZ)"
echo "quarry: $("$quarry" --version) (git $quarry_rev)"
bench_host
echo "store: $runs runs, $(find "$store" -type f | wc -l) objects; quarry index took ${index_seconds}s"
echo
echo "| page | median (ms) | p95 (ms) | ratio to the stored listing |"
echo "| --- | ---: | ---: | ---: |"
echo "| stored listing \`/$mid-linux/index.html\` (reference) | ${static% *} | ${static#* } | 1.0 |"
for entry in "run list, page 1|" "run list, page 20|?page=20" "run page|$mid-linux/" \
             "package page|-/package/$mid-linux/demo/" "simple page (stored)|$mid-linux/python/simple/demo/"; do
    label=${entry%%|*}
    path=${entry#*|}
    m=$(measure "$path")
    ratio=$(echo "scale=1; ${m% *} / $static_median" | bc)
    echo "| $label \`/$path\` | ${m% *} | ${m#* } | $ratio |"
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
