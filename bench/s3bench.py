#!/usr/bin/env python3
"""S3-side benchmarks for Quarry, driven by bench/s3_requests.sh, bench/lambda_cold.sh and
bench/upload_throughput.sh (which install the tools and build the binaries first).

  requests  store operations per upload event into a root of 10,000 wheels, against a full sweep
  lambda    the Lambda bootstrap's cold init, first and warm invocations, peak RSS
  upload    `quarry upload` vs `aws s3 cp` throughput: one 1 GiB file, 200 x 1 MiB files

Every server runs on 127.0.0.1 on a port picked at run time, in its own process group, and is
killed on exit; its pid is also appended to WORK/pids for the shell wrapper's EXIT trap.
Servers: s3s-fs (SigV4 verified; its ListObjectsV2 returns no ETags) and moto (ETags listed,
SigV4 not checked). Request counts are taken on both sides: Quarry's own `store operations`
line (CLI only) and the server's log (one line per HTTP request; the Lambda has no counter).
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import boto3
from botocore.config import Config

HERE = Path(__file__).resolve().parent
AK, SK, BUCKET, REGION = "benchak", "benchsecretkey", "bench", "us-east-1"
ROOT = "9999-linux/python/"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
GNU_TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None  # Debian: apt-get install time
OPS_LINE = re.compile(
    r"store operations: (\d+) ops \(list (\d+), head (\d+), get (\d+), put (\d+), delete (\d+)\)")


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f} s")


class Procs:
    """Processes this run started, each leading its own process group."""

    def __init__(self, work: Path):
        self.pids_file = work / "pids"
        self.procs: list[subprocess.Popen] = []

    def spawn(self, cmd, **kw) -> subprocess.Popen:
        proc = subprocess.Popen(cmd, start_new_session=True, **kw)
        self.procs.append(proc)
        with self.pids_file.open("a") as f:
            f.write(f"{proc.pid}\n")
        return proc

    def stop(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            self.stop(proc)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    """An S3-compatible server on loopback: `s3s-fs` or `moto`."""

    def __init__(self, kind: str, work: Path, procs: Procs, count_requests: bool = True):
        self.kind, self.procs = kind, procs
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.dir = work / f"{kind}-data"
        self.log_path = work / f"{kind}.log"
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        env = dict(os.environ)
        if kind == "s3s-fs":
            # One "resolved route, op: X" line per request; warn-only when not counting.
            env["RUST_LOG"] = "s3s::ops=debug" if count_requests else "warn"
            env["NO_COLOR"] = "1"
            cmd = [os.environ.get("S3S_FS", "s3s-fs"), "--host", "127.0.0.1", "--port", str(self.port),
                   "--access-key", AK, "--secret-key", SK, str(self.dir)]
        elif kind == "moto":
            cmd = [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(self.port)]
        else:
            raise SystemExit(f"unknown server {kind}")
        self.log_file = self.log_path.open("wb")
        self.proc = procs.spawn(cmd, stdout=self.log_file, stderr=subprocess.STDOUT, env=env)
        wait_port(self.port, self.proc, kind)
        self.s3 = boto3.client(
            "s3", endpoint_url=self.url, aws_access_key_id=AK, aws_secret_access_key=SK,
            region_name=REGION, config=Config(s3={"addressing_style": "path"},
                                              max_pool_connections=32, retries={"max_attempts": 5}))
        # moto answers before its routes are up on a slow start; retry the first call.
        for attempt in range(50):
            try:
                self.s3.create_bucket(Bucket=BUCKET)
                break
            except Exception:  # noqa: BLE001
                if attempt == 49:
                    raise
                time.sleep(0.2)
        log(f"{kind} on {self.url} (pid {self.proc.pid}), bucket {BUCKET}")

    def env(self) -> dict:
        env = dict(os.environ)
        for k in list(env):
            if k.startswith("AWS_") or k.startswith("QUARRY_"):
                del env[k]
        env.update(AWS_ENDPOINT_URL=self.url, AWS_ACCESS_KEY_ID=AK, AWS_SECRET_ACCESS_KEY=SK,
                   AWS_REGION=REGION, AWS_DEFAULT_REGION=REGION, AWS_EC2_METADATA_DISABLED="true",
                   AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null",
                   RUST_LOG="info", NO_COLOR="1")
        return env

    def mark(self) -> int:
        self.log_file.flush()
        return self.log_path.stat().st_size

    def requests_since(self, mark: int) -> collections.Counter:
        time.sleep(0.05)  # let the server's last log line land
        with self.log_path.open("rb") as f:
            f.seek(mark)
            text = f.read().decode("utf-8", "replace")
        ops: collections.Counter = collections.Counter()
        if self.kind == "s3s-fs":
            for m in re.finditer(r"resolved route, op: (\w+)", text):
                ops[m.group(1)] += 1
        else:
            for m in re.finditer(r'"(GET|HEAD|PUT|POST|DELETE) (\S+) HTTP/[\d.]+" (\d+)', text):
                method, path = m.group(1), m.group(2)
                query = urllib.parse.urlsplit(path).query
                if method == "GET" and "list-type" in query:
                    op = "ListObjectsV2"
                elif method == "POST" and "uploads" in query and "uploadId" not in query:
                    op = "CreateMultipartUpload"
                elif method == "POST" and "uploadId" in query:
                    op = "CompleteMultipartUpload"
                elif method == "PUT" and "partNumber" in query:
                    op = "UploadPart"
                else:
                    op = {"GET": "GetObject", "HEAD": "HeadObject", "PUT": "PutObject",
                          "DELETE": "DeleteObject", "POST": "Post"}[method]
                ops[op] += 1
        return ops

    def cpu(self) -> float:
        return cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        self.procs.stop(self.proc)
        self.log_file.close()

    # -- data ---------------------------------------------------------------------------------
    def seed(self, wheels: list[Path], prefix: str) -> None:
        t0 = time.perf_counter()
        if self.kind == "s3s-fs":
            # s3s-fs serves the files under DIR/BUCKET as objects (no x-amz-meta, no stored ETag).
            dest = self.dir / BUCKET / prefix
            dest.mkdir(parents=True, exist_ok=True)
            for w in wheels:
                shutil.copy2(w, dest / w.name)
            how = "copied into the s3s-fs data directory"
        else:
            def put(w: Path) -> None:
                self.s3.put_object(Bucket=BUCKET, Key=prefix + w.name, Body=w.read_bytes())
            with concurrent.futures.ThreadPoolExecutor(16) as pool:
                list(pool.map(put, wheels))
            how = "PutObject with boto3, 16 threads"
        listed = self.listing(prefix)
        n = sum(1 for k in listed["keys"] if k.endswith(".whl"))
        if n != len(wheels):
            raise SystemExit(f"seeding: listed {n} wheels under {prefix}, expected {len(wheels)}")
        log(f"seeded {n} wheels under s3://{BUCKET}/{prefix} ({how}) in {time.perf_counter() - t0:.1f} s")

    def listing(self, prefix: str) -> dict:
        """Page through `prefix` with a `/` delimiter, as the indexer does (1,000 keys a page)."""
        keys, prefixes, pages = [], [], 0
        for page in self.s3.get_paginator("list_objects_v2").paginate(
                Bucket=BUCKET, Prefix=prefix, Delimiter="/"):
            pages += 1
            keys += [o["Key"] for o in page.get("Contents", [])]
            prefixes += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        return {"pages": pages, "keys": keys, "prefixes": prefixes}


def run_timed(cmd: list[str], env: dict, cwd: Path | None = None) -> dict:
    """Run a command to completion; wall time, CPU and peak RSS (wait4), stdout, stderr."""
    # Peak RSS comes from GNU time's %M: a rusage from wait4 on our own child would report this
    # Python process's RSS instead (Linux carries the pre-exec high-water mark into the child).
    rss_file = None
    if GNU_TIME:
        fd, rss_file = tempfile.mkstemp(prefix="rss-", suffix=".txt")
        os.close(fd)
        cmd = [GNU_TIME, "-f", "%M", "-o", rss_file] + list(cmd)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out_chunks, err_chunks = [], []
    t_out = threading.Thread(target=lambda: out_chunks.append(proc.stdout.read()))
    t_err = threading.Thread(target=lambda: err_chunks.append(proc.stderr.read()))
    t_out.start(), t_err.start()
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    t_out.join(), t_err.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    out = out_chunks[0].decode("utf-8", "replace")
    err = ANSI.sub("", err_chunks[0].decode("utf-8", "replace"))
    maxrss_kib = float("nan")
    if rss_file:
        text = Path(rss_file).read_text().split()
        os.unlink(rss_file)
        if text and text[-1].isdigit():
            maxrss_kib = int(text[-1])
    if proc.returncode != 0:
        sys.stderr.write(err[-4000:])
        raise SystemExit(f"command failed ({proc.returncode}): {' '.join(cmd)}")
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "maxrss_mib": maxrss_kib / 1024,
            "stdout": out, "stderr": err}


def quarry_ops(stderr: str) -> dict | None:
    m = OPS_LINE.search(stderr)
    if not m:
        return None
    total, lst, head, get, put, delete = map(int, m.groups())
    return {"total": total, "list": lst, "head": head, "get": get, "put": put, "delete": delete}


def fmt_quarry_ops(ops: dict | None) -> str:
    if not ops:
        return "—"
    return (f"{ops['total']:,} (list {ops['list']}, head {ops['head']:,}, get {ops['get']:,}, "
            f"put {ops['put']:,}, delete {ops['delete']})")


SHORT = {"ListObjectsV2": "list", "HeadObject": "head", "GetObject": "get", "PutObject": "put",
         "DeleteObject": "delete", "CreateMultipartUpload": "mpu-create", "UploadPart": "part",
         "CompleteMultipartUpload": "mpu-complete", "CreateBucket": "create-bucket"}


def fmt_requests(ops: collections.Counter) -> str:
    total = sum(ops.values())
    parts = ", ".join(f"{SHORT.get(k, k)} {v:,}" for k, v in sorted(ops.items(), key=lambda kv: -kv[1]))
    return f"{total:,} ({parts})" if total else "0"


def generate(work: Path, projects: int, versions: int, extra: int) -> tuple[list[Path], list[Path]]:
    data = work / "data"
    manifest = data / "manifest.json"
    want = {"projects": projects, "versions": versions, "extra": extra}
    if manifest.exists():
        got = json.loads(manifest.read_text())
        if all(got.get(k) == v for k, v in want.items()):
            log(f"reusing wheels in {data}")
        else:
            shutil.rmtree(data)
    if not manifest.exists():
        log(f"generating {projects * versions} wheels + {extra} extra")
        subprocess.run([sys.executable, str(HERE / "gen_wheels.py"), "--out", str(data), "--projects",
                        str(projects), "--versions", str(versions), "--extra", str(extra)], check=True,
                       stdout=subprocess.DEVNULL)
    return sorted((data / "wheels").glob("*.whl")), sorted((data / "extra").glob("*.whl"))


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# =============================================================================================
# requests
# =============================================================================================

def bench_requests(args, procs: Procs, work: Path) -> list[str]:
    wheels, extra = generate(work, args.projects, args.versions, 2)
    quarry = args.quarry
    lines: list[str] = []
    summary: list[str] = []
    for kind in args.servers:
        server = Server(kind, work, procs)
        server.seed(wheels, ROOT)
        base_env = server.env()
        atomic = dict(base_env, QUARRY_S3_CONDITIONAL_WRITES="atomic")
        rows = []

        def step(label: str, cmd: list[str], env: dict) -> dict:
            subprocess.run(["sync"], check=False)
            mark, cpu0 = server.mark(), server.cpu()
            r = run_timed(cmd, env)
            r["server"] = server.requests_since(mark)
            r["server_cpu"] = server.cpu() - cpu0
            r["quarry"] = quarry_ops(r["stderr"])
            report = [ln for ln in r["stdout"].splitlines() if ln.strip()]
            r["report"] = report[-1] if report else ""
            rows.append((label, r))
            log(f"{kind}: {label}: {r['wall']:.2f} s, quarry {fmt_quarry_ops(r['quarry'])}, "
                f"server {fmt_requests(r['server'])}")
            return r

        s3url = f"s3://{BUCKET}/"
        scratch = step("quarry index (from scratch, whole bucket)", [quarry, "index", s3url], atomic)
        noop = step("quarry index --prefix ROOT (nothing changed)",
                    [quarry, "index", s3url, "--prefix", ROOT], atomic)
        up1 = step(f"quarry upload 1 wheel ({extra[0].name})",
                   [quarry, "upload", str(extra[0]), "--to", f"s3://{BUCKET}/{ROOT}"], atomic)
        event = step("per event: quarry index --prefix ROOT after 1 new wheel",
                     [quarry, "index", s3url, "--prefix", ROOT], atomic)
        step(f"quarry upload 1 wheel ({extra[1].name})",
             [quarry, "upload", str(extra[1]), "--to", f"s3://{BUCKET}/{ROOT}"], base_env)
        event_verify = step("per event, default mode for a custom endpoint (verify commit)",
                            [quarry, "index", s3url, "--prefix", ROOT], base_env)
        force = step("quarry index --force --prefix ROOT (full republish)",
                     [quarry, "index", "--force", s3url, "--prefix", ROOT], atomic)

        listed = server.listing(ROOT)
        n_wheels = sum(1 for k in listed["keys"] if k.endswith(".whl"))
        n_keys = len(listed["keys"]) + len(listed["prefixes"])
        anchor = listed["pages"] + n_wheels
        server_cpu_total = server.cpu()
        server.stop()

        lines += [f"### {kind}", "",
                  f"Root `s3://{BUCKET}/{ROOT}`: {n_wheels:,} wheels; a `/`-delimited listing returns "
                  f"{n_keys:,} entries ({len(listed['keys']):,} objects + {len(listed['prefixes'])} prefix) in "
                  f"{listed['pages']} pages of 1,000. Wheels were seeded without `x-amz-meta-sha256`. "
                  "`QUARRY_S3_CONDITIONAL_WRITES=atomic` (as on AWS S3) except where noted.", "",
                  "| run | wall s | quarry store ops | HTTP requests seen by the server | quarry CPU s | "
                  "server CPU s | peak RSS MiB |",
                  "| --- | ---: | --- | --- | ---: | ---: | ---: |"]
        for label, r in rows:
            lines.append(f"| {label} | {r['wall']:.2f} | {fmt_quarry_ops(r['quarry'])} | "
                         f"{fmt_requests(r['server'])} | {r['cpu']:.2f} | {r['server_cpu']:.2f} | "
                         f"{r['maxrss_mib']:.0f} |")
        lines.append("")
        lines.append("Reports: " + "; ".join(f"{label.split(':')[0]} → `{r['report']}`"
                                             for label, r in rows if r["report"] and "upload" not in label))
        lines.append("")

        ev_ops = event["quarry"]["total"]
        ev_http = sum(event["server"].values())
        force_ops = force["quarry"]["total"]
        lines += [
            f"Anchor (full sweep re-reading every object): {listed['pages']} list pages + {n_wheels:,} "
            f"GETs = **{anchor:,} requests**.",
            f"Per event (atomic): **{ev_ops:,} store ops** ({ev_http:,} HTTP requests), "
            f"{event['wall']:.2f} s; anchor / per event = **{anchor / ev_ops:,.1f}×**; "
            f"per event / anchor = {ev_ops / anchor:.4f}.",
            f"Per event, verify mode: {event_verify['quarry']['total']:,} ops, {event_verify['wall']:.2f} s. "
            f"No-op: {noop['quarry']['total']:,} ops, {noop['wall']:.2f} s.",
            f"`--force` full republish: **{force_ops:,} ops**, {force['wall']:.2f} s; "
            f"force / per event = {force_ops / ev_ops:,.1f}× ops, {force['wall'] / event['wall']:.1f}× wall. "
            f"From scratch: {scratch['quarry']['total']:,} ops, {scratch['wall']:.2f} s.",
            f"Server CPU over the whole {kind} session: {server_cpu_total:.1f} s.", ""]
        summary.append(f"| {kind} | {ev_ops:,} | {event['wall']:.2f} | {anchor:,} | {anchor / ev_ops:,.1f} | "
                       f"{force_ops:,} | {force['wall']:.2f} | {event_verify['quarry']['total']:,} | "
                       f"{scratch['quarry']['total']:,} | {scratch['wall']:.2f} |")
    head = ["## S3 requests per upload event (root of "
            f"{len(wheels):,} wheels)", "",
            "| server | per-event ops | per-event wall s | full-sweep anchor (requests) | anchor / event | "
            "--force ops | --force wall s | per-event ops, verify mode | from-scratch ops | from-scratch wall s |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    return head + summary + [""] + lines


# =============================================================================================
# lambda
# =============================================================================================

def s3_put_event(template: Path, bucket: str, key: str, size: int, etag: str) -> dict:
    doc = json.loads(template.read_text())
    record = doc["Records"][0]
    record["awsRegion"] = REGION
    record["eventTime"] = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    record["s3"]["bucket"]["name"] = bucket
    record["s3"]["bucket"]["arn"] = f"arn:aws:s3:::{bucket}"
    # S3 event keys are URL-encoded form: space → '+', '+' → '%2B'.
    record["s3"]["object"].update(key=urllib.parse.quote_plus(key, safe="/"), size=size,
                                  eTag=etag.strip('"'), sequencer=f"{time.time_ns():X}")
    return {"Records": [record]}


def socket_inodes(pid: int) -> set[str]:
    out = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                out.add(target[8:-1])
    except OSError:
        pass
    return out


def connected_to(pid: int, port: int) -> bool:
    """Has `pid` a TCP socket whose remote end is 127.0.0.1:port?"""
    inodes = socket_inodes(pid)
    if not inodes:
        return False
    want = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            parts = line.split()
            if parts[2] == want and parts[9] in inodes:
                return True
    return False


def proc_status(pid: int) -> dict:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        if k in ("VmHWM", "VmRSS"):
            out[k] = int(v.split()[0]) / 1024
    return out


def invoke(port: int, event: dict, timeout: float = 600) -> tuple[float, float, str]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/2015-03-31/functions/_/invocations",
                                 data=json.dumps(event).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        body = resp.read().decode("utf-8", "replace")
    return t0, time.perf_counter(), body


def bench_lambda(args, procs: Procs, work: Path) -> list[str]:
    wheels, extra = generate(work, args.projects, args.versions, 2)
    bootstrap = Path(args.bootstrap)
    template = HERE.parent / "lambda-indexer" / "tests" / "events" / "s3-put.json"
    lines = ["## Lambda bootstrap: cold init, invocations, peak RSS", "",
             f"`{bootstrap}` ({bootstrap.stat().st_size / 1e6:.1f} MB), run as deployed under "
             "`cargo lambda watch --only-lambda-apis`; env AWS_LAMBDA_FUNCTION_MEMORY_SIZE=256 (not "
             "enforced locally), QUARRY_S3_CONDITIONAL_WRITES=atomic (as on AWS S3), RUST_LOG=info. "
             f"Root of {len(wheels):,} wheels indexed beforehand by `quarry index`; each event is an "
             "ObjectCreated:Put for a wheel just stored by `quarry upload`.", "",
             "| server | init: spawn → polling runtime API (ms) | 1st invocation: spawn → response (ms) | "
             "1st handler (ready → response, ms) | warm invocation, new wheel (ms) | duplicate event (ms) | "
             "VmHWM after 1st (MiB) | VmHWM at end (MiB) | HTTP requests, 1st / warm / dup |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    notes = []
    for kind in args.servers:
        server = Server(kind, work, procs)
        server.seed(wheels, ROOT)
        env = server.env()
        env["QUARRY_S3_CONDITIONAL_WRITES"] = "atomic"
        r = run_timed([args.quarry, "index", f"s3://{BUCKET}/"], env)
        log(f"{kind}: initial quarry index: {r['wall']:.1f} s, {fmt_quarry_ops(quarry_ops(r['stderr']))}")

        api_port = free_port()
        emu_log = (work / f"emulator-{kind}.log").open("wb")
        emu_env = dict(os.environ)
        emu_env.pop("RUST_LOG", None)
        emu = procs.spawn([args.cargo, "lambda", "watch", "--only-lambda-apis", "-A", "127.0.0.1", "-P",
                           str(api_port)], cwd=str(HERE.parent), stdout=emu_log, stderr=subprocess.STDOUT,
                          env=emu_env)
        wait_port(api_port, emu, "cargo lambda watch", timeout=120)

        def upload_event(wheel: Path) -> dict:
            run_timed([args.quarry, "upload", str(wheel), "--to", f"s3://{BUCKET}/{ROOT}"], env)
            head = server.s3.head_object(Bucket=BUCKET, Key=ROOT + wheel.name)
            return s3_put_event(template, BUCKET, ROOT + wheel.name, head["ContentLength"], head["ETag"])

        first_event = upload_event(extra[0])
        benv = dict(env, AWS_LAMBDA_RUNTIME_API=f"http://127.0.0.1:{api_port}/.rt", AWS_LAMBDA_FUNCTION_NAME="_",
                    AWS_LAMBDA_FUNCTION_VERSION="1", AWS_LAMBDA_FUNCTION_MEMORY_SIZE="256",
                    AWS_LAMBDA_LOG_FORMAT="JSON")
        benv.pop("NO_COLOR", None)
        blog = (work / f"bootstrap-{kind}.log").open("wb")
        subprocess.run(["sync"], check=False)
        mark = server.mark()
        result: dict = {}

        def first_call() -> None:
            try:
                result["t0"], result["t1"], result["body"] = invoke(api_port, first_event)
            except Exception as e:  # noqa: BLE001
                result["error"] = repr(e)

        t_spawn = time.perf_counter()
        boot = procs.spawn([str(bootstrap)], env=benv, stdout=blog, stderr=subprocess.STDOUT)
        caller = threading.Thread(target=first_call)
        caller.start()
        t_ready = None
        while caller.is_alive() and boot.poll() is None:
            if connected_to(boot.pid, api_port):
                t_ready = time.perf_counter()
                break
            time.sleep(0.0005)
        while caller.is_alive() and boot.poll() is None:
            caller.join(0.05)
        if boot.poll() is not None:
            raise SystemExit(f"the bootstrap exited with {boot.returncode}; see {blog.name}")
        caller.join()
        if "error" in result:
            raise SystemExit(f"first invocation failed: {result.get('error')} (bootstrap rc {boot.poll()}); "
                             f"see {blog.name}")
        req_first = server.requests_since(mark)
        hwm_first = proc_status(boot.pid)["VmHWM"]
        t_first = result["t1"]

        # Warm: one more new wheel, stored and announced now.
        warm_event = upload_event(extra[1])
        mark = server.mark()
        w0, w1, warm_body = invoke(api_port, warm_event)
        req_warm = server.requests_since(mark)
        mark = server.mark()
        d0, d1, dup_body = invoke(api_port, warm_event)
        req_dup = server.requests_since(mark)
        status = proc_status(boot.pid)
        boot_cpu = cpu_seconds(boot.pid)
        procs.stop(boot)
        procs.stop(emu)
        blog.close()
        emu_log.close()
        server.stop()

        init_us = re.findall(r'"init_us":(\d+)', Path(blog.name).read_text(errors="replace"))
        self_init = f"{int(init_us[0]) / 1000:.1f} ms" if init_us else "not logged"
        init_ms = (t_ready - t_spawn) * 1000 if t_ready else float("nan")
        first_ms = (t_first - t_spawn) * 1000
        handler_ms = (t_first - t_ready) * 1000 if t_ready else float("nan")
        lines.append(
            f"| {kind} | {init_ms:.1f} | {first_ms:.0f} | {handler_ms:.0f} | {(w1 - w0) * 1000:.0f} | "
            f"{(d1 - d0) * 1000:.0f} | {hwm_first:.1f} | {status['VmHWM']:.1f} | "
            f"{sum(req_first.values()):,} / {sum(req_warm.values()):,} / {sum(req_dup.values()):,} |")
        notes.append(f"- {kind}: responses: 1st `{result['body'][:200]}`; warm `{warm_body[:200]}`; "
                     f"dup `{dup_body[:120]}`. Requests: 1st {fmt_requests(req_first)}; warm "
                     f"{fmt_requests(req_warm)}; dup {fmt_requests(req_dup)}. Bootstrap CPU {boot_cpu:.2f} s, "
                     f"VmRSS at end {status['VmRSS']:.1f} MiB; the bootstrap's own `initialized` log: init_us = {self_init}.")
        log(lines[-1])
    return lines + [""] + notes + ["",
                                   "Init = spawn until the bootstrap holds a TCP connection to the runtime API "
                                   "(its first `next` poll; /proc polled every 0.5 ms). The first invocation "
                                   "was queued at spawn. The 1st and warm runs each index 1 new wheel; the "
                                   "duplicate repeats the warm event (nothing to do)."]


# =============================================================================================
# upload
# =============================================================================================

def make_inputs(work: Path, big_mib: int, n_small: int, small_mib: int) -> tuple[Path, Path]:
    big = work / "inputs" / f"random-{big_mib}MiB.bin"
    small = work / "inputs" / f"dir-{n_small}x{small_mib}MiB"
    big.parent.mkdir(parents=True, exist_ok=True)
    if not big.exists() or big.stat().st_size != big_mib << 20:
        log(f"writing {big}")
        subprocess.run(["head", "-c", f"{big_mib}M", "/dev/urandom"], stdout=big.open("wb"), check=True)
    if not small.is_dir() or len(list(small.iterdir())) != n_small:
        shutil.rmtree(small, ignore_errors=True)
        small.mkdir()
        log(f"writing {n_small} files into {small}")
        for i in range(n_small):
            (small / f"file-{i:04d}.bin").write_bytes(os.urandom(small_mib << 20))
    return big, small


def bench_upload(args, procs: Procs, work: Path) -> list[str]:
    big, small = make_inputs(work, args.big_mib, args.small_files, args.small_mib)
    big_bytes = big.stat().st_size
    small_bytes = sum(p.stat().st_size for p in small.iterdir())
    server = Server("s3s-fs", work, procs, count_requests=False)
    env = server.env()
    aws = [args.aws, "--endpoint-url", server.url, "s3", "cp", "--only-show-errors"]
    cases = [
        ("1 file", big, big_bytes, 1,
         lambda run: [args.quarry, "upload", str(big), "--to", f"s3://{BUCKET}/upload-bench/q{run}/"],
         lambda run: aws + [str(big), f"s3://{BUCKET}/upload-bench-aws/a{run}/"]),
        (f"{args.small_files} files", small, small_bytes, args.small_files,
         lambda run: [args.quarry, "upload", str(small), "--to", f"s3://{BUCKET}/upload-bench/qd{run}/"],
         lambda run: aws + ["--recursive", str(small), f"s3://{BUCKET}/upload-bench-aws/ad{run}/"]),
    ]
    rows, ratios = [], []
    for label, path, nbytes, nfiles, qcmd, acmd in cases:
        results = {}
        for run in range(args.runs):
            for tool, cmd in (("quarry upload", qcmd(run)), ("aws s3 cp", acmd(run))):
                subprocess.run(["sync"], check=False)
                cpu0 = server.cpu()
                r = run_timed(cmd, env)
                r["server_cpu"] = server.cpu() - cpu0
                results.setdefault(tool, []).append(r)
                log(f"{label}: {tool}: {r['wall']:.2f} s = {nbytes / r['wall'] / 1e6:.0f} MB/s "
                    f"(client CPU {r['cpu']:.1f} s, server CPU {r['server_cpu']:.1f} s)")
        prefix_q, prefix_a = qcmd(0)[-1], acmd(0)[-1]
        for tool, dest in (("quarry upload", prefix_q), ("aws s3 cp", prefix_a)):
            got = server.listing(dest.split("/", 3)[3])
            stored = sum(1 for _ in got["keys"])
            if stored != nfiles:
                raise SystemExit(f"{tool}: {stored} objects under {dest}, expected {nfiles}")
        med = {}
        for tool, rs in results.items():
            rs.sort(key=lambda r: r["wall"])
            r = rs[len(rs) // 2]
            med[tool] = r
            rows.append(f"| {label} ({nbytes / 2**20:,.0f} MiB) | `{tool}` | {r['wall']:.2f} | "
                        f"{nbytes / r['wall'] / 1e6:.0f} | {r['cpu']:.1f} | {r['server_cpu']:.1f} | "
                        f"{r['maxrss_mib']:.0f} | {', '.join('%.2f' % x['wall'] for x in rs)} |")
        ratios.append(f"| {label} | {med['aws s3 cp']['wall'] / med['quarry upload']['wall']:.2f} |")
        # Free the disk before the next case.
        for d in ("upload-bench", "upload-bench-aws"):
            shutil.rmtree(server.dir / BUCKET / d, ignore_errors=True)
    server.stop()
    return (["## Upload throughput into s3s-fs: `quarry upload` vs `aws s3 cp`", "",
             f"Median of {args.runs} run(s); MB/s = 10^6 bytes per wall second; inputs in the page cache; "
             "`sync` before each command. Defaults of both tools: quarry hashes the file first, then "
             "PUT (multipart above 8 MiB, 4 parts in flight; 4 files in flight); aws: multipart "
             "above 8 MiB, 10 requests in flight.", "",
             "| input | tool | wall s | MB/s | client CPU s | server CPU s | client peak RSS MiB | runs (s) |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"] + rows +
            ["", "| input | throughput ratio quarry / aws (>1: quarry faster) |", "| --- | ---: |"] + ratios)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench", choices=["requests", "lambda", "upload"])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--quarry", required=True)
    ap.add_argument("--servers", nargs="+", default=["s3s-fs", "moto"])
    ap.add_argument("--projects", type=int, default=1000)
    ap.add_argument("--versions", type=int, default=10)
    ap.add_argument("--bootstrap")
    ap.add_argument("--cargo", default="cargo")
    ap.add_argument("--aws")
    ap.add_argument("--big-mib", type=int, default=1024)
    ap.add_argument("--small-files", type=int, default=200)
    ap.add_argument("--small-mib", type=int, default=1)
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    procs = Procs(args.work)

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, on_signal)
    load = load_average()
    try:
        out = {"requests": bench_requests, "lambda": bench_lambda, "upload": bench_upload}[args.bench](
            args, procs, args.work)
    finally:
        procs.stop_all()
    print("\n".join(out))
    print(f"\nload average at start: {load}; at end: {load_average()}; nproc {os.cpu_count()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
