#!/usr/bin/env python3
"""`+1 wheel` through the Lambda bootstrap on moto at 1,000 / 10,000 / 100,000 wheels.
Run through bench/lambda_big.sh (which builds the binaries and finds the venv).

Moto runs in this process (`ThreadedMotoServer`), so the bucket is seeded by calling moto's S3
backend directly (no HTTP: 100,000 wheels load in seconds). Every HTTP request moto answers is
recorded here (method, path, bytes received), which is the S3 request log. Per size N:

  1. seed s3://big-N/chan/ with N wheels (bench/gen_wheels.py output, as `aws s3 cp` would put
     them: no metadata);
  2. `quarry index s3://big-N/` from scratch (layout: `chan/` a pip root, find-links off),
     timed, with its requests;
  3. the bootstrap (release) started 5 times cold: init = spawn → its first `next` poll;
  4. for each of two extra wheels: `quarry upload` (not counted), then its EventBridge event in
     an SQS batch to the running bootstrap, as the template delivers it (lambda_run.py's
     shapes). Per event: S3 requests by method, bytes PUT, CPU of the bootstrap over the event
     (/proc/PID/stat ticks and the threads' schedstat run time), wall, VmHWM;
  5. find-links on: the layout changed, `quarry index s3://big-N/ --prefix chan/` (whole-root
     reconciliation, writes the page), a new bootstrap, two more extra wheels as in 4.

After each event the project's page must list the new wheel, and no request may list the root
without the project's prefix (that would be a whole-root fallback).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lambda_run as lr  # noqa: E402
import s3bench as sb  # noqa: E402

ROOT = "chan/"


class Moto:
    """moto's server in this process; `requests` records every answered request."""

    def __init__(self) -> None:
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.moto_server.threaded_moto_server import ThreadedMotoServer
        from moto.moto_server.werkzeug_app import MotoRequestHandler
        from moto.s3.models import s3_backends

        self.requests: list[tuple[float, str, str, int, int]] = []
        self.lock = threading.Lock()
        moto = self

        def log_request(handler, code="-", size="-") -> None:  # noqa: ARG001
            h = handler.headers
            sent = int(h.get("x-amz-decoded-content-length") or h.get("Content-Length") or 0)
            code = getattr(code, "value", code)
            with moto.lock:
                moto.requests.append((time.perf_counter(), handler.command, handler.path,
                                      int(code) if str(code).isdigit() else 0, sent))

        MotoRequestHandler.log_request = log_request
        MotoRequestHandler.log_error = lambda *_a, **_k: None
        self.port = sb.free_port()
        self.server = ThreadedMotoServer("127.0.0.1", self.port, verbose=False)
        self.server.start()
        self.url = f"http://127.0.0.1:{self.port}"
        self.backend = s3_backends[DEFAULT_ACCOUNT_ID]["global"]

    def env(self) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "QUARRY_"))}
        env.update(AWS_ENDPOINT_URL=self.url, AWS_ACCESS_KEY_ID=sb.AK, AWS_SECRET_ACCESS_KEY=sb.SK,
                   AWS_REGION=sb.REGION, AWS_DEFAULT_REGION=sb.REGION, AWS_EC2_METADATA_DISABLED="true",
                   AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null",
                   RUST_LOG="info", NO_COLOR="1", QUARRY_S3_CONDITIONAL_WRITES="atomic")
        return env

    def seed(self, bucket: str, files: list[Path], prefix: str) -> float:
        t0 = time.perf_counter()
        self.backend.create_bucket(bucket, sb.REGION)
        for path in files:
            self.backend.put_object(bucket, prefix + path.name, path.read_bytes(), disable_notification=True)
        return time.perf_counter() - t0

    def get(self, bucket: str, key: str) -> bytes:
        return self.backend.get_object(bucket, key).value

    def head(self, bucket: str, key: str):
        return self.backend.get_object(bucket, key)

    def count(self, bucket: str) -> int:
        return len(self.backend.get_bucket(bucket).keys)

    def mark(self) -> int:
        time.sleep(0.05)
        with self.lock:
            return len(self.requests)

    def since(self, mark: int) -> list[tuple[float, str, str, int, int]]:
        time.sleep(0.05)  # the last answer's log call
        with self.lock:
            return self.requests[mark:]


def classify(reqs: list[tuple[float, str, str, int, int]]) -> collections.Counter:
    ops: collections.Counter = collections.Counter()
    for _, method, path, _, _ in reqs:
        query = urllib.parse.urlsplit(path).query
        if method == "GET" and "list-type" in query:
            ops["list"] += 1
        else:
            ops[method.lower()] += 1
    return ops


def fmt_ops(ops: collections.Counter) -> str:
    return f"{sum(ops.values())} (" + ", ".join(f"{k} {v}" for k, v in sorted(ops.items())) + ")"


def list_prefixes(reqs) -> list[str]:
    out = []
    for _, method, path, _, _ in reqs:
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)
        if method == "GET" and "list-type" in q:
            out.append(q.get("prefix", [""])[0])
    return out


def layout(find_links: bool) -> str:
    return f'[layout]\nruns = false\n[[layout.root]]\nprefix = "{ROOT}"\nkind = "pip"\nfind_links = {str(find_links).lower()}\n'


def timed(cmd: list[str], env: dict, moto: Moto, log: Path) -> dict:
    mark = moto.mark()
    t0 = time.perf_counter()
    before = os.times()
    with log.open("ab") as f:
        r = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT)
    after = os.times()
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}); see {log}")
    reqs = moto.since(mark)
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return {"wall": wall, "cpu": cpu, "ops": classify(reqs), "put_bytes": sum(r[4] for r in reqs if r[1] == "PUT")}


def thread_ns(pid: int) -> int:
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except OSError:
            pass
    return total


def one_event(moto: Moto, api: lr.RuntimeApi, boot, bucket: str, wheel: Path, quarry: str, env: dict,
              log: Path) -> dict:
    key = ROOT + wheel.name
    timed([quarry, "upload", str(wheel), "--to", f"s3://{bucket}/{ROOT}"], env, moto, log)
    obj = moto.head(bucket, key)
    event = lr.sqs_batch([lr.eventbridge(bucket, key, obj.size, obj.etag)])
    mark = moto.mark()
    ticks0, ns0 = sb.cpu_seconds(boot.pid), thread_ns(boot.pid)
    took, kind, body = api.invoke(event)
    ticks1, ns1 = sb.cpu_seconds(boot.pid), thread_ns(boot.pid)
    reqs = moto.since(mark)
    if kind != "response" or json.loads(body or "{}").get("batchItemFailures"):
        raise SystemExit(f"event for {key}: {kind} {body[:400]}")
    project = wheel.name.split("-")[0].replace("_", "-").lower()
    page = moto.get(bucket, f"{ROOT}simple/{project}/index.html").decode()
    if wheel.name not in page:
        raise SystemExit(f"{ROOT}simple/{project}/index.html does not list {wheel.name} after its event")
    prefixes = list_prefixes(reqs)
    puts = [(r[2].split("?")[0].split(f"/{bucket}/", 1)[-1], r[4]) for r in reqs if r[1] == "PUT"]
    return {"wheel": wheel.name, "wall": took, "cpu_ticks": ticks1 - ticks0, "cpu_ns": ns1 - ns0,
            "ops": classify(reqs), "put_bytes": sum(b for _, b in puts), "puts": puts,
            "lists": prefixes, "hwm": sb.proc_status(boot.pid)["VmHWM"],
            "requests": [f"{r[1]} {urllib.parse.unquote(r[2])} {r[3]}" for r in reqs],
            "whole_root": any(not p.startswith(ROOT) or p == ROOT for p in prefixes)}


def start_bootstrap(procs: sb.Procs, bootstrap: Path, env: dict, api: lr.RuntimeApi, log_path: Path):
    """Spawn the bootstrap as lambda_run.start_bootstrap does; init = spawn → the runtime API
    receiving its first `next` poll (no /proc/net/tcp polling, which is slow beside a busy S3
    server's thousands of sockets)."""
    benv = dict(env, AWS_LAMBDA_RUNTIME_API=f"127.0.0.1:{api.port}", AWS_LAMBDA_FUNCTION_NAME="quarry-index",
                AWS_LAMBDA_FUNCTION_VERSION="$LATEST", AWS_LAMBDA_FUNCTION_MEMORY_SIZE="256",
                AWS_LAMBDA_LOG_FORMAT="JSON")
    benv.pop("NO_COLOR", None)
    t0 = time.perf_counter()
    proc = procs.spawn([str(bootstrap)], env=benv, stdout=log_path.open("wb"), stderr=subprocess.STDOUT)
    while not api.first_poll.wait(0.01):
        if proc.poll() is not None:
            raise SystemExit(f"the bootstrap exited with {proc.returncode}; see {log_path}")
    return proc, api.first_poll_at - t0


def cold_starts(procs: sb.Procs, bootstrap: Path, env: dict, n: int, work: Path, tag: str):
    """`n` cold starts; returns (the last bootstrap still running, its runtime API, init ms,
    CPU ms of each init: the threads' run time when the first `next` poll is seen)."""
    inits, cpus = [], []
    for attempt in range(n):
        api = lr.RuntimeApi()  # one per start: a stopped bootstrap's pending poll must not take an event
        boot, init_s = start_bootstrap(procs, bootstrap, env, api, work / f"bootstrap-{tag}-{attempt}.log")
        inits.append(init_s * 1000)
        cpus.append(thread_ns(boot.pid) / 1e6)
        if attempt < n - 1:
            procs.stop(boot)
    return boot, api, inits, cpus


def bench_size(args, moto: Moto, procs: sb.Procs, data: Path, work: Path) -> dict:
    wheels = sorted((data / "wheels").glob("*.whl"))
    extras = sorted((data / "extra").glob("*.whl"))
    if len(extras) < 4:
        raise SystemExit(f"{data}/extra holds {len(extras)} wheels; gen_wheels.py --extra 4")
    n = len(wheels)
    bucket = f"big-{n}"
    out: dict = {"wheels": n, "load": [sb.load_average()]}
    seed_s = moto.seed(bucket, wheels, ROOT)
    sb.log(f"{n:,} wheels seeded into moto's backend in {seed_s:.1f} s ({moto.count(bucket):,} objects)")
    out["seed_s"] = seed_s
    cfg = work / f"quarry-{n}.toml"
    env = moto.env()
    log = work / f"quarry-{n}.log"
    cfg.write_text(layout(args.links == "on"))
    r = timed([args.quarry, "index", f"s3://{bucket}/", "--config", str(cfg)], env, moto, log)
    sb.log(f"from scratch: {r['wall']:.1f} s wall, {r['cpu']:.1f} s CPU, {fmt_ops(r['ops'])}")
    out["scratch"] = r
    out["objects"] = moto.count(bucket)
    out["events"] = {}
    for links, pick in ((False, extras[:2]), (True, extras[2:4])):
        if args.links != "both" and links != (args.links == "on"):
            continue
        if links and args.links == "on":
            out["links_on"] = {"wall": 0.0, "ops": collections.Counter()}
        elif links:
            cfg.write_text(layout(True))
            r = timed([args.quarry, "index", f"s3://{bucket}/", "--prefix", ROOT, "--config", str(cfg)],
                      env, moto, log)
            sb.log(f"find-links on, whole reconciliation: {r['wall']:.1f} s, {fmt_ops(r['ops'])}")
            out["links_on"] = r
        benv = dict(env, QUARRY_LAYOUT=layout(links))
        boot, api, inits, cpus = cold_starts(procs, Path(args.bootstrap), benv, args.cold, work, f"{n}-{links}")
        out.setdefault("inits", []).extend(inits)
        out.setdefault("init_cpu", []).extend(cpus)
        out.setdefault("hwm_idle", []).append(sb.proc_status(boot.pid)["VmHWM"])
        events = []
        for wheel in pick:
            e = one_event(moto, api, boot, bucket, wheel, args.quarry, env, log)
            sb.log(f"N={n:,} find-links {'on' if links else 'off'} {e['wheel']}: {e['wall'] * 1000:.0f} ms, "
                   f"CPU {e['cpu_ns'] / 1e6:.1f} ms, {fmt_ops(e['ops'])}, {e['put_bytes']:,} B, "
                   f"lists {e['lists']}, VmHWM {e['hwm']:.1f} MiB")
            events.append(e)
        out["events"][links] = events
        procs.stop(boot)
    out["load"].append(sb.load_average())
    return out


def init_only(args, moto: Moto, procs: sb.Procs, work: Path) -> list[str]:
    """Cold starts only: wall (spawn → first `next` poll), CPU of the init, VmHWM when idle."""
    moto.backend.create_bucket("init-only", sb.REGION)
    env = dict(moto.env(), QUARRY_LAYOUT=layout(False))
    load0 = sb.load_average()
    boot, _api, inits, cpus = cold_starts(procs, Path(args.bootstrap), env, args.init_only, work, "init")
    hwm = sb.proc_status(boot.pid)["VmHWM"]
    procs.stop(boot)
    inits, cpus = sorted(inits), sorted(cpus)
    q = lambda xs, f: xs[min(len(xs) - 1, int(f * len(xs)))]  # noqa: E731
    return [
        "| cold starts | init wall ms: min / median / p90 / max | init CPU ms: min / median / max | VmHWM idle MiB | load |",
        "| ---: | --- | --- | ---: | --- |",
        f"| {len(inits)} | {inits[0]:.1f} / {statistics.median(inits):.1f} / {q(inits, 0.9):.1f} / {inits[-1]:.1f} | "
        f"{cpus[0]:.1f} / {statistics.median(cpus):.1f} / {cpus[-1]:.1f} | {hwm:.1f} | {load0} → {sb.load_average()} |",
    ]


def report(results: list[dict], args) -> list[str]:
    lines = [
        "| wheels | find-links | event (wheel) | S3 requests by the event | bytes PUT | CPU over the event, ms "
        "(schedstat / stat ticks) | wall ms | bootstrap VmHWM MiB | list prefixes |",
        "| ---: | --- | --- | --- | ---: | --- | ---: | ---: | --- |",
    ]
    for res in results:
        for links, events in res["events"].items():
            for i, e in enumerate(events):
                kind = "first" if i == 0 else "second"
                lines.append(
                    f"| {res['wheels']:,} | {'on' if links else 'off'} | {kind} (`{e['wheel']}`) | "
                    f"{fmt_ops(e['ops'])} | {e['put_bytes']:,} | {e['cpu_ns'] / 1e6:.1f} / "
                    f"{e['cpu_ticks'] * 1000:.0f} | {e['wall'] * 1000:.0f} | {e['hwm']:.1f} | "
                    f"{', '.join(sorted(set(e['lists'])))} |")
    lines += ["", "| wheels | objects after indexing | seed (backend) s | from scratch: wall s / CPU s | "
              "from-scratch requests | find-links on, whole reconciliation: wall s / requests | "
              "init ms, median of the cold starts (min / max) | init CPU ms, median (max) | "
              "VmHWM idle MiB | load |",
              "| ---: | ---: | ---: | --- | --- | --- | --- | --- | --- | --- |"]
    for res in results:
        s, lo, inits = res["scratch"], res["links_on"], sorted(res["inits"])
        cpus = sorted(res.get("init_cpu") or [float("nan")])
        lines.append(
            f"| {res['wheels']:,} | {res['objects']:,} | {res['seed_s']:.1f} | {s['wall']:.1f} / {s['cpu']:.1f} | "
            f"{fmt_ops(s['ops'])} | {lo['wall']:.1f} / {fmt_ops(lo['ops'])} | {statistics.median(inits):.1f} "
            f"({inits[0]:.1f} / {inits[-1]:.1f}) | {statistics.median(cpus):.1f} ({cpus[-1]:.1f}) | {', '.join(f'{h:.1f}' for h in res['hwm_idle'])} | "
            f"{' → '.join(res['load'])} |")
    lines += ["", "Objects PUT by each event (key: bytes):", ""]
    for res in results:
        for links, events in res["events"].items():
            for e in events:
                lines.append(f"- {res['wheels']:,}, find-links {'on' if links else 'off'}, `{e['wheel']}`: "
                             + ", ".join(f"`{k}` {b:,}" for k, b in e["puts"]))
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", nargs="*", help="gen_wheels.py --extra 4 outputs, one per size")
    ap.add_argument("--work", required=True)
    ap.add_argument("--quarry", required=True)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--cold", type=int, default=5, help="cold starts per bootstrap (two bootstraps per size)")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--links", choices=["both", "off", "on"], default="both",
                    help="find-links page: off then on (default), or one of them from scratch")
    ap.add_argument("--init-only", type=int, metavar="K",
                    help="only K cold starts against an empty bucket (init does not read the root)")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    procs = sb.Procs(work)
    moto = Moto()
    sb.log(f"moto (in process) on {moto.url}")
    results = []
    if args.init_only:
        try:
            print("\n".join(init_only(args, moto, procs, work)))
        finally:
            procs.stop_all()
        return 0
    try:
        for data in args.data:
            results.append(bench_size(args, moto, procs, Path(data), work))
            if args.json:
                Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    finally:
        procs.stop_all()
    print("\n".join(report(results, args)))
    print(f"\nload average at end: {sb.load_average()}; nproc {os.cpu_count()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
