#!/usr/bin/env python3
"""The Lambda bootstrap driven as the deployed template drives it, on loopback S3 servers.
Run through bench/lambda_run.sh (which finds the tools and the binaries).

  run   a simulated TheRock CI run on moto: artifact archives, .debs, .rpms and wheels land in
        one run prefix over three stages; each object's EventBridge "Object Created" event
        reaches the function in SQS batches of 10 (infra/template.yaml: BatchSize 10). Reports
        S3 requests per landed object (moto's request log) and Lambda-seconds per run.
  big   one event on a large pip root (s3s-fs, the root indexed beforehand by `quarry index`):
        the bootstrap's init time and its peak RSS (VmHWM) for that event.

The Lambda runtime API is a small in-process server (no cargo-lambda): it hands out one queued
event per `next` poll and records the response; the bootstrap runs as deployed, one instance,
invocations one after another (the template allows up to MaximumConcurrency at once; the sum of
invocation durations is the same bill either way, contention aside).
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import hashlib
import http.server
import io
import json
import os
import queue
import random
import re
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import s3bench as sb  # noqa: E402

RUN = "12345678901-linux/"
ARN = "arn:aws:lambda:us-east-1:000000000000:function:quarry-index"
QUEUE_ARN = "arn:aws:sqs:us-east-1:000000000000:quarry-index-events"


class RuntimeApi:
    """The Lambda runtime API: `next` blocks until an event is queued; responses are recorded."""

    def __init__(self) -> None:
        self.events: queue.Queue = queue.Queue()
        self.done: dict[str, tuple[float, str, str]] = {}
        self.delivered: dict[str, float] = {}
        self.cond = threading.Condition()
        self.first_poll = threading.Event()  # set when the first `next` poll arrives
        self.first_poll_at = 0.0
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                if not self.path.endswith("/runtime/invocation/next"):
                    self.send_error(404)
                    return
                if not api.first_poll.is_set():
                    api.first_poll_at = time.perf_counter()
                    api.first_poll.set()
                request_id, body = api.events.get()
                api.delivered[request_id] = time.perf_counter()
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Lambda-Runtime-Aws-Request-Id", request_id)
                self.send_header("Lambda-Runtime-Deadline-Ms", str(int(time.time() * 1000) + 900_000))
                self.send_header("Lambda-Runtime-Invoked-Function-Arn", ARN)
                self.send_header("Lambda-Runtime-Trace-Id", "Root=1-00000000-000000000000000000000000")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
                m = re.search(r"/runtime/invocation/([^/]+)/(response|error)$", self.path)
                if m:
                    with api.cond:
                        api.done[m.group(1)] = (time.perf_counter(), m.group(2), body)
                        api.cond.notify_all()
                elif self.path.endswith("/runtime/init/error"):
                    with api.cond:
                        api.done["init"] = (time.perf_counter(), "init-error", body)
                        api.cond.notify_all()
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def invoke(self, event: dict, timeout: float = 900) -> tuple[float, str, str]:
        """Queue `event`, wait for its answer: (seconds from delivery to answer, kind, body)."""
        request_id = str(uuid.uuid4())
        self.events.put((request_id, event))
        deadline = time.monotonic() + timeout
        with self.cond:
            while request_id not in self.done and "init" not in self.done:
                if not self.cond.wait(max(0.0, deadline - time.monotonic())):
                    raise SystemExit(f"no answer to invocation {request_id} within {timeout} s")
        if "init" in self.done:
            raise SystemExit(f"the bootstrap's init failed: {self.done['init'][2]}")
        t1, kind, body = self.done[request_id]
        return t1 - self.delivered[request_id], kind, body


def start_bootstrap(procs: sb.Procs, bootstrap: Path, env: dict, api: RuntimeApi, log_path: Path):
    """Spawn the bootstrap; returns (process, init seconds: spawn → its first `next` poll)."""
    benv = dict(env, AWS_LAMBDA_RUNTIME_API=f"127.0.0.1:{api.port}", AWS_LAMBDA_FUNCTION_NAME="quarry-index",
                AWS_LAMBDA_FUNCTION_VERSION="$LATEST", AWS_LAMBDA_FUNCTION_MEMORY_SIZE="256",
                AWS_LAMBDA_LOG_FORMAT="JSON", QUARRY_S3_CONDITIONAL_WRITES="atomic")
    benv.pop("NO_COLOR", None)
    t0 = time.perf_counter()
    proc = procs.spawn([str(bootstrap)], env=benv, stdout=log_path.open("wb"), stderr=subprocess.STDOUT)
    while proc.poll() is None and not sb.connected_to(proc.pid, api.port):
        time.sleep(0.0005)
    if proc.poll() is not None:
        raise SystemExit(f"the bootstrap exited with {proc.returncode}; see {log_path}")
    return proc, time.perf_counter() - t0


def eventbridge(bucket: str, key: str, size: int, etag: str) -> dict:
    """An EventBridge "Object Created" event as S3 sends it (keys are not URL-encoded here)."""
    return {
        "version": "0", "id": str(uuid.uuid4()), "detail-type": "Object Created", "source": "aws.s3",
        "account": "000000000000", "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "region": sb.REGION, "resources": [f"arn:aws:s3:::{bucket}"],
        "detail": {"version": "0", "bucket": {"name": bucket},
                   "object": {"key": key, "size": size, "etag": etag.strip('"'), "sequencer": f"{time.time_ns():X}"},
                   "request-id": uuid.uuid4().hex[:16].upper(), "requester": "000000000000",
                   "source-ip-address": "127.0.0.1", "reason": "PutObject"},
    }


def sqs_batch(bodies: list[dict]) -> dict:
    """An SQS event as the Lambda service delivers a batch from the queue."""
    return {"Records": [{
        "messageId": str(uuid.uuid4()), "receiptHandle": uuid.uuid4().hex, "body": json.dumps(b),
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": str(int(time.time() * 1000))},
        "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs", "eventSourceARN": QUEUE_ARN,
        "awsRegion": sb.REGION} for b in bodies]}


# TheRock-style artifact names: {artifact}_{component}_{target family or generic}.tar.zst
ARTIFACTS = ["amd-llvm", "base", "blas", "composable-kernel", "core-hip", "core-runtime", "fft", "hipify",
             "miopen", "prim", "rand", "rccl", "solver", "sparse", "sysdeps", "rocprofiler-sdk", "rocwmma",
             "hipdnn", "rocdecode", "rocjpeg", "aqlprofile", "amd-smi", "rocgdb", "roctracer", "half"]
COMPONENTS = ["lib", "dev", "dbg", "doc", "run", "test", "license"]
FAMILIES = ["gfx94X-dcgpu", "gfx110X-all", "gfx1151", "gfx120X-all", "generic"]


def artifact_archives(n: int, out: Path, sums: bool) -> list[Path]:
    """`n` small artifact archives (zstd-compressed tars of one file), TheRock's naming, each
    followed by its `.sha256sum` sibling when `sums` (TheRock's `artifact_manager push` uploads
    both)."""
    out.mkdir(parents=True, exist_ok=True)
    names = [f"{a}_{c}_{f}.tar.zst" for f in FAMILIES for a in ARTIFACTS for c in COMPONENTS][:n]
    rng = random.Random(7)
    paths = []
    for name in names:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            payload = rng.randbytes(rng.randint(512, 4096))
            info = tarfile.TarInfo(f"{name.split('.')[0]}/lib/file.so")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
        path = out / name
        subprocess.run(["zstd", "-q", "-f", "-o", str(path)], input=buf.getvalue(), check=True)
        paths.append(path)
        if sums:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            sidecar = out / f"{name}.sha256sum"
            sidecar.write_text(f"{digest}  {name}\n")
            paths.append(sidecar)
    return paths


def land(server: sb.Server, files: list[tuple[Path, str]]) -> list[dict]:
    """PUT each (file, key) with boto3 (16 at once); EventBridge events in the order they landed."""
    landed: list[tuple[float, dict]] = []
    lock = threading.Lock()

    def put(item: tuple[Path, str]) -> None:
        path, key = item
        data = path.read_bytes()
        etag = server.s3.put_object(Bucket=sb.BUCKET, Key=key, Body=data)["ETag"]
        with lock:
            landed.append((time.perf_counter(), eventbridge(sb.BUCKET, key, len(data), etag)))

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(put, files))
    return [e for _, e in sorted(landed, key=lambda t: t[0])]


def therock_inputs(args, work: Path) -> list[list[tuple[Path, str]]]:
    """The run's objects as (file, key), split into three stages (a third of each kind each)."""
    fx = Path(args.fixtures)
    debs = sorted((fx / "deb").glob("*.deb"))[: args.debs]
    rpms = sorted((fx / "rpm").glob("*.rpm"))[: args.rpms]
    if len(debs) < args.debs or len(rpms) < args.rpms:
        raise SystemExit(f"{fx} holds {len(debs)} debs and {len(rpms)} rpms; build them with "
                         f"tests/fixtures/native/build.sh {fx} --many {max(args.debs, args.rpms)}")
    wheels, _ = sb.generate(work, max(1, args.wheels // 3), 3, 0)
    wheels = wheels[: args.wheels]
    archives = artifact_archives(args.artifacts, work / "artifacts", args.sha256sum)
    kinds = [
        [(p, RUN + p.name) for p in archives],
        [(p, RUN + "packages/deb/pool/main/" + p.name) for p in debs],
        [(p, RUN + "packages/rpm/x86_64/" + p.name) for p in rpms],
        [(p, RUN + "python/" + p.name) for p in wheels],
    ]
    # An archive and its .sha256sum land in the same stage (one push), the sum just after it.
    def stage(items: list, s: int) -> list:
        groups: list[list] = []
        for item in items:
            if item[1].endswith(".sha256sum") and groups:
                groups[-1].append(item)
            else:
                groups.append([item])
        return [item for group in groups[s::3] for item in group]

    return [[item for kind in kinds for item in stage(kind, s)] for s in range(3)]


def bench_run(args, procs: sb.Procs, work: Path) -> list[str]:
    stages = therock_inputs(args, work)
    server = sb.Server("moto", work, procs)
    api = RuntimeApi()
    env = server.env()
    boot, init_s = start_bootstrap(procs, Path(args.bootstrap), env, api, work / "bootstrap-run.log")
    rows, totals = [], collections.Counter()
    total_objects, lambda_s, invocations, failures = 0, 0.0, 0, 0
    t_run = time.perf_counter()
    for n, files in enumerate(stages, 1):
        t0 = time.perf_counter()
        events = land(server, files)
        put_s = time.perf_counter() - t0
        mark = server.mark()
        stage_s = 0.0
        for i in range(0, len(events), args.batch):
            took, kind, body = api.invoke(sqs_batch(events[i : i + args.batch]))
            stage_s += took
            invocations += 1
            if kind != "response" or json.loads(body or "{}").get("batchItemFailures"):
                failures += 1
                sb.log(f"stage {n} batch {i // args.batch}: {kind} {body[:300]}")
        ops = server.requests_since(mark)
        totals.update(ops)
        total_objects += len(files)
        lambda_s += stage_s
        count = sum(ops.values())
        rows.append(f"| {n} | {len(files):,} | {put_s:.1f} | {-(-len(events) // args.batch)} | {stage_s:.1f} | "
                    f"{count:,} | {count / len(files):.2f} | {sb.fmt_requests(ops)} |")
        sb.log(rows[-1])
    wall = time.perf_counter() - t_run
    status = sb.proc_status(boot.pid)
    cpu = sb.cpu_seconds(boot.pid)
    checks = check_indexes(server, stages)
    procs.stop(boot)
    server.stop()
    count = sum(totals.values())
    return [
        "| stage | objects landed | upload s | invocations (SQS batches of "
        f"{args.batch}) | Lambda s (sum of invocations) | S3 requests by the Lambda | per object | requests |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        *rows,
        f"| run | {total_objects:,} | | {invocations} | {lambda_s:.1f} | {count:,} | "
        f"{count / total_objects:.2f} | {sb.fmt_requests(totals)} |",
        "",
        f"Lambda-seconds per run: {lambda_s:.1f} s over {invocations} invocations ({failures} failed or "
        f"partially failed); bootstrap CPU {cpu:.1f} s; VmHWM {status['VmHWM']:.1f} MiB; init "
        f"{init_s * 1000:.1f} ms; wall for the three stages (uploads included) {wall:.0f} s.",
        f"Indexes at the end: {checks}.",
    ]


def check_indexes(server: sb.Server, stages: list[list[tuple[Path, str]]]) -> str:
    """That the run's indexes list everything that landed (what the Lambda was for)."""
    def text(key: str) -> str:
        return server.s3.get_object(Bucket=sb.BUCKET, Key=key)["Body"].read().decode("utf-8", "replace")

    keys = [k for files in stages for _, k in files]
    wheels_page = text(RUN + "python/index.html")
    want = collections.Counter("deb" if k.endswith(".deb") else "rpm" if k.endswith(".rpm") else
                               "whl" if k.endswith(".whl") else "archive" for k in keys
                               if not k.endswith(".sha256sum"))
    got = {
        "deb": text(RUN + "packages/deb/dists/stable/main/binary-amd64/Packages").count("\nPackage: ") + 1,
        "whl": sum(k[len(RUN) + len("python/"):] in wheels_page for k in keys if k.endswith(".whl")),
        "archive": sum(text(RUN + "index.html").count(k[len(RUN):] + "\"") > 0 for k in keys
                       if k.endswith(".tar.zst")),
    }
    repomd = text(RUN + "packages/rpm/x86_64/repodata/repomd.xml")
    got["rpm"] = want["rpm"] if "primary" in repomd else 0
    return ", ".join(f"{k} {got.get(k, 0)}/{v}" for k, v in sorted(want.items()))


def bench_big(args, procs: sb.Procs, work: Path) -> list[str]:
    wheels, extra = sb.generate(work, args.projects, args.versions, 1)
    server = sb.Server("s3s-fs", work, procs, count_requests=False)
    server.seed(wheels, sb.ROOT)
    env = server.env()
    env["QUARRY_S3_CONDITIONAL_WRITES"] = "atomic"
    r = sb.run_timed([args.quarry, "index", f"s3://{sb.BUCKET}/"], env)
    sb.log(f"quarry index of {len(wheels):,} wheels: {r['wall']:.1f} s, peak RSS {r['maxrss_mib']:.0f} MiB")
    sb.run_timed([args.quarry, "upload", str(extra[0]), "--to", f"s3://{sb.BUCKET}/{sb.ROOT}"], env)
    head = server.s3.head_object(Bucket=sb.BUCKET, Key=sb.ROOT + extra[0].name)
    event = sqs_batch([eventbridge(sb.BUCKET, sb.ROOT + extra[0].name, head["ContentLength"], head["ETag"])])
    inits = []
    for attempt in range(args.cold):
        # A runtime API per start: a stopped bootstrap's pending poll must not take the event.
        api = RuntimeApi()
        boot, init_s = start_bootstrap(procs, Path(args.bootstrap), env, api, work / f"bootstrap-{attempt}.log")
        inits.append(init_s * 1000)
        if attempt < args.cold - 1:
            procs.stop(boot)
    hwm_idle = sb.proc_status(boot.pid)["VmHWM"]
    samples = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            try:
                samples.append((time.perf_counter(), sb.proc_status(boot.pid)["VmRSS"]))
            except OSError:
                return
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    t0 = time.perf_counter()
    took, kind, body = api.invoke(event)
    stop.set()
    sampler.join()
    status = sb.proc_status(boot.pid)
    procs.stop(boot)
    server.stop()
    inits.sort()
    peak_at = max(samples, key=lambda s: s[1]) if samples else (t0, float("nan"))
    return [
        f"| wheels in the root | init, median of {len(inits)} cold starts (ms) | init min / max (ms) | "
        "VmHWM before the event (MiB) | event (s) | VmHWM after the event (MiB) | answer |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        f"| {len(wheels):,} | {inits[len(inits) // 2]:.1f} | {inits[0]:.1f} / {inits[-1]:.1f} | {hwm_idle:.1f} | "
        f"{took:.1f} | {status['VmHWM']:.1f} | {kind}: `{body[:120]}` |",
        "",
        f"RSS sampled every 50 ms during the event: peak {peak_at[1]:.1f} MiB at {peak_at[0] - t0:.1f} s "
        f"of {took:.1f} s. The root was indexed by `quarry index` ({r['wall']:.0f} s, peak RSS "
        f"{r['maxrss_mib']:.0f} MiB for the from-scratch run).",
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["run", "big"])
    ap.add_argument("--work", required=True)
    ap.add_argument("--quarry", required=True)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--fixtures", help="run: a directory with deb/*.deb and rpm/*.rpm")
    ap.add_argument("--artifacts", type=int, default=500)
    ap.add_argument("--debs", type=int, default=500)
    ap.add_argument("--rpms", type=int, default=500)
    ap.add_argument("--wheels", type=int, default=30)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--no-sha256sum", dest="sha256sum", action="store_false",
                    help="run: artifact archives without their .sha256sum siblings")
    ap.add_argument("--projects", type=int, default=10000)
    ap.add_argument("--versions", type=int, default=10)
    ap.add_argument("--cold", type=int, default=5, help="big: cold starts to time")
    args = ap.parse_args()
    work = Path(args.work)
    procs = sb.Procs(work)
    try:
        lines = bench_run(args, procs, work) if args.what == "run" else bench_big(args, procs, work)
    finally:
        procs.stop_all()
    print("\n".join(lines))
    print(f"\nload average at end: {sb.load_average()}; nproc {os.cpu_count()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
