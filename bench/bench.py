#!/usr/bin/env python3
"""Quarry's pip-indexer benchmark harness (called by bench/run.sh, which sets everything up).

Measures, each RUNS times (median reported):
  quarry-scratch   `quarry index STORE` on a fresh store holding the N synthetic wheels
  quarry-noop      `quarry index STORE` again with nothing changed
  dumb-pypi        `dumb-pypi --package-list-json` full build (default flags, and with
                   --no-per-release-json), from the precomputed names and hashes
  pypiserver       server started on the wheel directory: first and second GET /simple/ (directory
                   scan), first GET /simple/<project>/ (rescan, then hash that project's files), and
                   a spread sample of other project pages whose mean, times the number of projects,
                   estimates serving every page once; for the simple-dir backend (rescans on every
                   request) and cached-dir (watchdog-invalidated cache)
  quarry-upload    `quarry upload` of one new wheel into the indexed root via `quarry serve`:
                   wall time of the command, store-operation deltas from /metrics
  quarry-drop      one new wheel copied into the root, then `quarry index STORE`
  dumb-pypi-incr   dumb-pypi with --previous-package-list-json and one more line
and, with --eatmydata, quarry-scratch again with fsync disabled (to show what durability costs).

Every server is started on 127.0.0.1 on a port chosen at run time, waited for with a bounded
loop, and killed on exit (also on SIGINT/SIGTERM). WORK/pids always lists the children still
running, so run.sh's EXIT trap can kill them too if this process itself dies.
"""

from __future__ import annotations

import argparse
import atexit
import http.client
import json
import os
import re
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = "bench-linux/python"
OPS_RE = re.compile(
    r"store operations: (\d+) ops \(list (\d+), head (\d+), get (\d+), put (\d+), delete (\d+)\)"
)
OP_KINDS = ("list", "head", "get", "put", "delete")
METRIC_RE = re.compile(r'^quarry_store_operations_total\{op="(\w+)"\} (\d+)$', re.M)

_children: list[subprocess.Popen] = []
_pid_file: Path | None = None


# ----------------------------------------------------------------------------- process handling


def _write_pid_file() -> None:
    """Keep WORK/pids listing exactly the children still running (each leads its own group)."""
    if _pid_file is not None:
        tmp = _pid_file.with_suffix(".tmp")
        tmp.write_text("".join(f"{p.pid}\n" for p in _children))
        tmp.replace(_pid_file)


def _register(proc: subprocess.Popen) -> None:
    _children.append(proc)
    _write_pid_file()


def _unregister(proc: subprocess.Popen) -> None:
    if proc in _children:
        _children.remove(proc)
    _write_pid_file()


def stop(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM the process (it leads its own session), wait up to `grace`, then SIGKILL."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=grace)
    _unregister(proc)


def _cleanup() -> None:
    for proc in list(_children):
        try:
            stop(proc, grace=3.0)
        except Exception as e:  # noqa: BLE001 - best effort at exit
            print(f"warning: could not stop pid {proc.pid}: {e}", file=sys.stderr)


def _on_signal(signum, _frame):
    _cleanup()
    sys.exit(128 + signum)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Ran:
    seconds: float
    max_rss_kib: int
    stdout: str
    stderr: str
    returncode: int
    # Average cores kept busy by anything other than the timed command during its run (from
    # /proc/stat minus the command's own rusage): a check that the machine was quiet.
    other_cores: float = 0.0


def busy_cpu_seconds() -> float:
    """CPU seconds spent busy on all cores since boot (user+nice+system+irq+softirq+steal)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def run_timed(argv: list[str], *, env: dict | None = None, check: bool = True,
              timeout: float = 600.0) -> Ran:
    """Run a command to completion; wall time from just before spawn to reaping, and the child's
    own peak RSS from wait4 (not the maximum over all children). Dirty pages left by earlier
    steps (copies, previous runs) are flushed first, outside the timing, so one run's write-back
    does not land in the next run's time."""
    os.sync()
    out_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"quarry-bench-{os.getpid()}.out"
    err_path = out_path.with_suffix(".err")
    with out_path.open("w+b") as out, err_path.open("w+b") as err:
        busy0 = busy_cpu_seconds()
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, start_new_session=True)
        _register(proc)
        deadline = t0 + timeout
        while True:
            pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                stop(proc)
                raise RuntimeError(f"timed out after {timeout}s: {' '.join(argv)}")
            time.sleep(0.002)
        seconds = time.perf_counter() - t0
        own = rusage.ru_utime + rusage.ru_stime
        other = max(0.0, (busy_cpu_seconds() - busy0 - own) / seconds)
        proc.returncode = os.waitstatus_to_exitcode(status)
        _unregister(proc)
        out.seek(0)
        err.seek(0)
        ran = Ran(seconds, rusage.ru_maxrss, out.read().decode(errors="replace"),
                  err.read().decode(errors="replace"), proc.returncode, other)
    out_path.unlink(missing_ok=True)
    err_path.unlink(missing_ok=True)
    if check and ran.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {ran.returncode}\nstdout:\n{ran.stdout[-3000:]}"
                           f"\nstderr:\n{ran.stderr[-3000:]}")
    return ran


def http_get(host: str, port: int, path: str, *, headers: dict | None = None,
             timeout: float = 600.0) -> tuple[int, bytes, float]:
    """One GET on a fresh connection; seconds cover connect, request and reading the body."""
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    return resp.status, body, time.perf_counter() - t0


def wait_http_ok(host: str, port: int, path: str, proc: subprocess.Popen,
                 deadline_s: float = 60.0) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before answering {path}")
        try:
            status, _, _ = http_get(host, port, path, timeout=2.0)
            if status == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"no 200 from http://{host}:{port}{path} within {deadline_s}s")


def background_cores(window: float = 1.0) -> float:
    """Average cores busy over `window` seconds while this harness runs nothing."""
    b0, t0 = busy_cpu_seconds(), time.perf_counter()
    time.sleep(window)
    return (busy_cpu_seconds() - b0) / (time.perf_counter() - t0)


def peak_rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


# ----------------------------------------------------------------------------- helpers


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def parse_ops(stderr: str) -> dict[str, int]:
    matches = OPS_RE.findall(stderr)
    if not matches:
        raise RuntimeError(f"no 'store operations' line in quarry's stderr:\n{stderr[-2000:]}")
    total, *kinds = (int(x) for x in matches[-1])
    ops = dict(zip(OP_KINDS, kinds))
    ops["total"] = total
    return ops


def fmt_ops(ops: dict[str, int]) -> str:
    return (f"{ops['total']} (list {ops['list']}, head {ops['head']}, get {ops['get']}, "
            f"put {ops['put']}, delete {ops['delete']})")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def project_of(filename: str) -> str:
    return normalize(filename.split("-", 1)[0])


def load_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def copy_wheels(src: Path, dst: Path) -> None:
    """Copy preserving mtimes (quarry's upload-time comes from the file's mtime)."""
    dst.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-a", f"{src}/.", str(dst)], check=True)


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# ----------------------------------------------------------------------------- checks


class Problems:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, msg: str) -> None:
        print(f"PROBLEM: {msg}", file=sys.stderr)
        self.items.append(msg)


def check_quarry_root(root_dir: Path, expected: list[dict], problems: Problems, label: str) -> None:
    """Compare quarry's published pages with what the generator knows about every wheel."""
    by_project: dict[str, dict[str, dict]] = {}
    for row in expected:
        by_project.setdefault(project_of(row["filename"]), {})[row["filename"]] = row

    simple_json = root_dir / "simple" / "index.json"
    if not simple_json.is_file():
        problems.add(f"{label}: {simple_json} missing")
        return
    names = {p["name"] for p in json.loads(simple_json.read_text())["projects"]}
    if names != set(by_project):
        problems.add(f"{label}: simple/index.json lists {len(names)} projects, expected "
                     f"{len(by_project)} (missing e.g. {sorted(set(by_project) - names)[:3]}, "
                     f"extra e.g. {sorted(names - set(by_project))[:3]})")
    html_links = len(re.findall(r"<a ", (root_dir / "simple" / "index.html").read_text()))
    if html_links != len(by_project):
        problems.add(f"{label}: simple/index.html has {html_links} links, expected {len(by_project)}")

    find_links = (root_dir / "index.html").read_text()
    got = dict(re.findall(r'href="([^"#]+)#sha256=([0-9a-f]{64})"', find_links))
    want = {r["filename"]: r["hash"].split("=", 1)[1] for r in expected}
    if got != want:
        missing = sorted(set(want) - set(got))[:3]
        wrong = sorted(k for k in want if k in got and got[k] != want[k])[:3]
        problems.add(f"{label}: find-links index.html has {len(got)} files, expected {len(want)}; "
                     f"missing e.g. {missing}, wrong hash e.g. {wrong}")

    bad_pages = []
    for project, files in by_project.items():
        page = root_dir / "simple" / project / "index.json"
        html = root_dir / "simple" / project / "index.html"
        if not page.is_file() or not html.is_file():
            bad_pages.append(f"{project}: page missing")
            continue
        doc = json.loads(page.read_text())
        listed = {f["filename"]: f for f in doc["files"]}
        if set(listed) != set(files):
            bad_pages.append(f"{project}: lists {sorted(listed)} expected {sorted(files)}")
            continue
        for fname, row in files.items():
            f = listed[fname]
            if f["hashes"].get("sha256") != row["hash"].split("=", 1)[1]:
                bad_pages.append(f"{fname}: sha256 differs")
            if f.get("requires-python") != row["requires_python"]:
                bad_pages.append(f"{fname}: requires-python {f.get('requires-python')!r} "
                                 f"!= {row['requires_python']!r}")
            cm = (f.get("core-metadata") or {}).get("sha256")
            if cm != row["core_metadata"].split("=", 1)[1]:
                bad_pages.append(f"{fname}: core-metadata {cm!r} != {row['core_metadata']!r}")
        if html.read_text().count("<a ") != len(files):
            bad_pages.append(f"{project}: index.html has {html.read_text().count('<a ')} links")
    if bad_pages:
        problems.add(f"{label}: {len(bad_pages)} project-page problems, e.g. {bad_pages[:5]}")

    import hashlib

    bad_sidecars = []
    for row in expected:
        side = root_dir / f"{row['filename']}.metadata"
        if not side.is_file():
            bad_sidecars.append(f"{side.name} missing")
        elif "sha256=" + hashlib.sha256(side.read_bytes()).hexdigest() != row["core_metadata"]:
            bad_sidecars.append(f"{side.name} content differs from the wheel's METADATA")
    if bad_sidecars:
        problems.add(f"{label}: {len(bad_sidecars)} .metadata sidecar problems, e.g. {bad_sidecars[:3]}")


# ----------------------------------------------------------------------------- benches


@dataclass
class Results:
    meta: dict = field(default_factory=dict)
    rows: dict = field(default_factory=dict)  # name -> dict(samples=[...], ...)

    def quiet_check(self, section: str) -> None:
        cores = background_cores()
        self.meta.setdefault("background_cores", {})[section] = round(cores, 2)
        if cores > 0.25:
            print(f"  warning: {cores:.2f} cores busy with other work before {section}",
                  file=sys.stderr)

    def add(self, name: str, seconds: float, **extra) -> None:
        row = self.rows.setdefault(name, {"samples": []})
        row["samples"].append(seconds)
        for k, v in extra.items():
            row.setdefault(k, []).append(v)

    def med(self, name: str) -> float:
        return median(self.rows[name]["samples"])


def bench_quarry_scratch(a, res: Results, wheels: Path, expected: list[dict], problems: Problems) -> Path:
    """Fresh store per run. With --eatmydata, an fsync-disabled run follows each normal run
    (interleaved, so both see the same disk conditions)."""
    store = None
    for r in range(a.runs):
        if store is not None:
            shutil.rmtree(store)
        store = a.work / f"store-{r}"
        copy_wheels(wheels, store / ROOT)
        ran = run_timed([str(a.quarry), "index", str(store)])
        ops = parse_ops(ran.stderr)
        res.add("quarry-scratch", ran.seconds, ops=ops, rss_kib=ran.max_rss_kib,
                other_cores=ran.other_cores)
        print(f"  quarry index (scratch) run {r + 1}: {ran.seconds:.2f}s, {fmt_ops(ops)}, "
              f"peak RSS {ran.max_rss_kib / 1024:.0f} MiB | {ran.stdout.strip()}", file=sys.stderr)
        if f"{len(expected)} added" not in ran.stdout:
            problems.add(f"quarry index from scratch printed {ran.stdout.strip()!r}, "
                         f"expected '{len(expected)} added'")
        if a.eatmydata:
            other = a.work / f"store-eatmydata-{r}"
            shutil.rmtree(other, ignore_errors=True)
            copy_wheels(wheels, other / ROOT)
            ran = run_timed([str(a.eatmydata), str(a.quarry), "index", str(other)])
            res.add("quarry-scratch-nofsync", ran.seconds, ops=parse_ops(ran.stderr),
                    rss_kib=ran.max_rss_kib, other_cores=ran.other_cores)
            print(f"  eatmydata quarry index (scratch, fsync disabled) run {r + 1}: {ran.seconds:.2f}s",
                  file=sys.stderr)
            shutil.rmtree(other)
    assert store is not None
    check_quarry_root(store / ROOT, expected, problems, "after quarry index from scratch")
    root = store / ROOT
    res.meta["quarry_outputs"] = {
        "state_file_bytes": (root / ".quarry-index.json").stat().st_size,
        "find_links_bytes": (root / "index.html").stat().st_size,
        "simple_root_html_bytes": (root / "simple" / "index.html").stat().st_size,
        "simple_dir_bytes": dir_bytes(root / "simple"),
        "metadata_sidecars": len(list(root.glob("*.metadata"))),
    }
    return store


def bench_quarry_noop(a, res: Results, store: Path, problems: Problems) -> None:
    for r in range(a.runs):
        ran = run_timed([str(a.quarry), "index", str(store)])
        ops = parse_ops(ran.stderr)
        res.add("quarry-noop", ran.seconds, ops=ops, rss_kib=ran.max_rss_kib, other_cores=ran.other_cores)
        print(f"  quarry index (no-op) run {r + 1}: {ran.seconds:.2f}s, {fmt_ops(ops)} | "
              f"{ran.stdout.strip()}", file=sys.stderr)
        if "(unchanged)" not in ran.stdout:
            problems.add(f"no-op quarry index did not report '(unchanged)': {ran.stdout.strip()!r}")
        if ops["put"] or ops["delete"]:
            problems.add(f"no-op quarry index wrote to the store: {fmt_ops(ops)}")


def bench_dumb_pypi(a, res: Results, package_list: Path, n: int, problems: Problems) -> Path:
    variants = [("dumb-pypi", []), ("dumb-pypi-no-per-release-json", ["--no-per-release-json"])]
    keep = None
    for name, flags in variants:
        for r in range(a.runs):
            out = a.work / f"dumb-{name}-{r}"
            shutil.rmtree(out, ignore_errors=True)
            ran = run_timed([str(a.venv / "bin" / "dumb-pypi"), "--package-list-json", str(package_list),
                             "--output-dir", str(out), "--packages-url", "../../pool/", *flags])
            res.add(name, ran.seconds, rss_kib=ran.max_rss_kib, other_cores=ran.other_cores)
            print(f"  {name} run {r + 1}: {ran.seconds:.2f}s, peak RSS {ran.max_rss_kib / 1024:.0f} MiB",
                  file=sys.stderr)
            if name == "dumb-pypi" and r == a.runs - 1:
                keep = out
            else:
                shutil.rmtree(out)
    assert keep is not None
    links = len(re.findall(r"<a ", (keep / "simple" / "index.html").read_text()))
    res.meta["dumb_pypi_outputs"] = {"simple_index_links": links,
                                     "files": sum(1 for p in keep.rglob("*") if p.is_file())}
    if links < n // 10:
        problems.add(f"dumb-pypi simple/index.html has only {links} links")
    return keep


def bench_dumb_pypi_incremental(a, res: Results, package_list: Path, extra_rows: list[dict],
                                full_out: Path) -> None:
    lines = package_list.read_text()
    for r in range(a.runs):
        row = extra_rows[r % len(extra_rows)]
        new_list = a.work / f"packages-plus-{r}.jsonl"
        new_list.write_text(lines + json.dumps(row) + "\n")
        out = a.work / f"dumb-incr-{r}"
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(full_out, out)
        ran = run_timed([str(a.venv / "bin" / "dumb-pypi"), "--package-list-json", str(new_list),
                         "--previous-package-list-json", str(package_list), "--output-dir", str(out),
                         "--packages-url", "../../pool/"])
        res.add("dumb-pypi-incremental", ran.seconds, rss_kib=ran.max_rss_kib, other_cores=ran.other_cores)
        print(f"  dumb-pypi incremental (+1 wheel) run {r + 1}: {ran.seconds:.2f}s", file=sys.stderr)
        shutil.rmtree(out)
        new_list.unlink()


def start_pypiserver(a, wheels: Path, backend: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    log = (a.work / f"pypiserver-{backend}.log").open("ab")
    argv = [str(a.venv / "bin" / "pypi-server"), "run", "-p", str(port), "-i", "127.0.0.1",
            "-a", ".", "-P", ".", "--disable-fallback", "--backend", backend,
            "--server", "auto", str(wheels)]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    _register(proc)
    # /health answers without touching the package directory.
    wait_http_ok("127.0.0.1", port, "/health", proc)
    return proc, port


def bench_pypiserver(a, res: Results, wheels: Path, n_projects: int, sample: str,
                     problems: Problems) -> None:
    for backend in ("simple-dir", "cached-dir"):
        for r in range(a.runs):
            proc, port = start_pypiserver(a, wheels, backend)
            try:
                status, body, first = http_get("127.0.0.1", port, "/simple/")
                names = [n.decode() for n in re.findall(rb'href="([^"/]+)/"', body)]
                if status != 200 or len(names) != n_projects:
                    problems.add(f"pypiserver {backend} /simple/: status {status}, {len(names)} links "
                                 f"(expected {n_projects})")
                _, _, second = http_get("127.0.0.1", port, "/simple/")
                status, body, project_first = http_get("127.0.0.1", port, f"/simple/{sample}/")
                if status != 200 or body.count(b"#sha256=") != a.versions:
                    problems.add(f"pypiserver {backend} /simple/{sample}/: status {status}, "
                                 f"{body.count(b'#sha256=')} hashed links")
                res.add(f"pypiserver-{backend}-simple-first", first)
                res.add(f"pypiserver-{backend}-simple-second", second)
                res.add(f"pypiserver-{backend}-project-first", project_first)
                # A spread sample of other project pages, each requested once: the per-page cost
                # of pypiserver's lazy equivalent of a full index (list, then hash the project's
                # files). Fetching all of them would take minutes, so the total is extrapolated.
                step = max(1, len(names) // a.page_sample)
                picked = [n for n in names[::step] if n != sample][: a.page_sample]
                page_times = []
                for name in picked:
                    st, page, t = http_get("127.0.0.1", port, f"/simple/{name}/")
                    if st != 200 or b"#sha256=" not in page:
                        problems.add(f"pypiserver {backend} /simple/{name}/: status {st}")
                        break
                    page_times.append(t)
                if page_times:
                    mean = statistics.mean(page_times)
                    res.add(f"pypiserver-{backend}-page-mean", mean)
                    res.add(f"pypiserver-{backend}-all-pages-est", mean * n_projects)
                rss = peak_rss_kib(proc.pid)
                res.rows[f"pypiserver-{backend}-simple-first"].setdefault("rss_kib", []).append(rss)
                print(f"  pypiserver {backend} run {r + 1}: /simple/ first {first:.3f}s, second "
                      f"{second:.3f}s; /simple/{sample}/ first {project_first:.3f}s; "
                      f"{len(page_times)} other project pages, mean {statistics.mean(page_times or [0]):.3f}s",
                      file=sys.stderr)
            finally:
                stop(proc)


def metrics(port: int) -> dict[str, int]:
    status, body, _ = http_get("127.0.0.1", port, "/metrics")
    if status != 200:
        raise RuntimeError(f"/metrics answered {status}")
    return {k: int(v) for k, v in METRIC_RE.findall(body.decode())}


def start_quarry_serve(a, store: Path, token_file: Path) -> tuple[subprocess.Popen, str, int, float]:
    log = (a.work / "quarry-serve.log").open("ab")
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(a.quarry), "serve", "--store", str(store), "--addr", "127.0.0.1:0",
                             "--token-file", str(token_file)],
                            stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    log.close()
    _register(proc)
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    line = b""
    deadline = time.monotonic() + 120
    while not line.endswith(b"\n"):
        if time.monotonic() > deadline:
            raise RuntimeError("quarry serve printed no URL within 120s")
        if proc.poll() is not None:
            raise RuntimeError(f"quarry serve exited with {proc.returncode}; see {a.work}/quarry-serve.log")
        if sel.select(timeout=0.1):
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                continue
            line += chunk
    sel.close()
    startup = time.perf_counter() - t0
    url = line.decode().strip().splitlines()[0]
    m = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/", url)
    if not m:
        raise RuntimeError(f"unexpected URL line from quarry serve: {url!r}")
    port = int(m.group(1))
    wait_http_ok("127.0.0.1", port, "/healthz", proc)
    return proc, url, port, startup


def bench_quarry_upload(a, res: Results, store: Path, extra: list[Path], problems: Problems) -> None:
    token_file = a.work / "token"
    token_file.unlink(missing_ok=True)
    proc, url, port, startup = start_quarry_serve(a, store, token_file)
    res.meta["quarry_serve_startup_seconds"] = startup
    try:
        before = metrics(port)
        res.meta["quarry_serve_ops_after_startup"] = before
        # Reading prebuilt pages, for context next to pypiserver's numbers.
        sample = a.sample_project
        st, body, t_simple = http_get("127.0.0.1", port, f"/{ROOT}/simple/",
                                      headers={"Accept": "text/html"})
        st2, _, t_project = http_get("127.0.0.1", port, f"/{ROOT}/simple/{sample}/",
                                     headers={"Accept": "text/html"})
        res.add("quarry-serve-simple-first", t_simple)
        res.add("quarry-serve-project-first", t_project)
        if st != 200 or st2 != 200:
            problems.add(f"quarry serve GET simple pages: {st}, {st2}")
        after_reads = metrics(port)
        res.meta["quarry_serve_ops_for_two_page_reads"] = {
            k: after_reads.get(k, 0) - before.get(k, 0) for k in OP_KINDS}

        for r in range(a.runs):
            wheel = extra[r]
            m0 = metrics(port)
            ran = run_timed([str(a.quarry), "upload", str(wheel), "--to", f"{url}{ROOT}/",
                             "--token-file", str(token_file), "--json"])
            m1 = metrics(port)
            delta = {k: m1.get(k, 0) - m0.get(k, 0) for k in OP_KINDS}
            delta["total"] = sum(delta[k] for k in OP_KINDS)
            res.add("quarry-upload", ran.seconds, ops=delta, rss_kib=ran.max_rss_kib, other_cores=ran.other_cores)
            answer = json.loads(ran.stdout)
            status = answer["files"][0].get("status")
            print(f"  quarry upload run {r + 1} ({wheel.name}): {ran.seconds:.3f}s, server store ops "
                  f"{fmt_ops(delta)}, status {status}", file=sys.stderr)
            if status != "created":
                problems.add(f"upload of {wheel.name} answered status {status!r}")
            project = project_of(wheel.name)
            st, page, _ = http_get("127.0.0.1", port, f"/{ROOT}/simple/{project}/",
                                   headers={"Accept": "application/vnd.pypi.simple.v1+json"})
            if st != 200 or wheel.name not in page.decode(errors="replace"):
                problems.add(f"after uploading {wheel.name}, /{ROOT}/simple/{project}/ "
                             f"(status {st}) does not list it")
        res.meta["quarry_serve_peak_rss_kib"] = peak_rss_kib(proc.pid)
    finally:
        stop(proc)


def bench_quarry_drop(a, res: Results, store: Path, extra: list[Path], problems: Problems) -> None:
    root = store / ROOT
    for r in range(a.runs):
        wheel = extra[a.runs + r]
        shutil.copy2(wheel, root / wheel.name)
        ran = run_timed([str(a.quarry), "index", str(store)])
        ops = parse_ops(ran.stderr)
        res.add("quarry-drop", ran.seconds, ops=ops, rss_kib=ran.max_rss_kib, other_cores=ran.other_cores)
        print(f"  quarry index after dropping {wheel.name}: {ran.seconds:.3f}s, {fmt_ops(ops)} | "
              f"{ran.stdout.strip()}", file=sys.stderr)
        if "1 added" not in ran.stdout:
            problems.add(f"quarry index after dropping one wheel printed {ran.stdout.strip()!r}")
        page = root / "simple" / project_of(wheel.name) / "index.json"
        if wheel.name not in page.read_text():
            problems.add(f"{page} does not list the dropped {wheel.name}")


# ----------------------------------------------------------------------------- report


def report(a, res: Results, problems: Problems) -> str:
    med = res.med
    q = med("quarry-scratch")
    lines = []
    w = lines.append
    w(f"N = {res.meta['wheels']} wheels in {res.meta['projects']} projects "
      f"({res.meta['wheel_bytes_total'] / 1e6:.1f} MB); median of {a.runs} runs; wall seconds.")
    w("")
    w("| measurement | median s | runs (s) | notes |")
    w("| --- | ---: | --- | --- |")

    def row(name: str, label: str, note: str = "") -> None:
        if name not in res.rows:
            return
        samples = res.rows[name]["samples"]
        if name != "quarry-upload":  # its "other" load is the quarry server doing the work
            note = "; ".join(filter(None, [note, load_note(name)]))
        w(f"| {label} | {median(samples):.3f} | {', '.join(f'{s:.3f}' for s in samples)} | {note} |")

    def ops_note(name: str) -> str:
        ops = res.rows[name].get("ops")
        if not ops:
            return ""
        return "store ops " + fmt_ops(ops[len(ops) // 2])

    def load_note(name: str) -> str:
        other = res.rows[name].get("other_cores")
        if other and max(other) > 0.5:
            return f"other load up to {max(other):.2f} cores"
        return ""

    def rss_note(name: str) -> str:
        rss = [x for x in res.rows[name].get("rss_kib", []) if x]
        return f"peak RSS {max(rss) / 1024:.0f} MiB" if rss else ""

    row("quarry-scratch", "quarry index, from scratch",
        "; ".join(filter(None, [ops_note("quarry-scratch"), rss_note("quarry-scratch")])))
    row("quarry-scratch-nofsync", "quarry index, from scratch, under eatmydata (no fsync)",
        "not a supported mode: shows the cost of durable writes")
    row("quarry-noop", "quarry index, no-op", ops_note("quarry-noop"))
    row("dumb-pypi", "dumb-pypi, full build (default flags)", rss_note("dumb-pypi"))
    row("dumb-pypi-no-per-release-json", "dumb-pypi, full build, --no-per-release-json",
        rss_note("dumb-pypi-no-per-release-json"))
    for backend in ("simple-dir", "cached-dir"):
        row(f"pypiserver-{backend}-simple-first", f"pypiserver {backend}: first GET /simple/",
            rss_note(f"pypiserver-{backend}-simple-first") + " (server, at the end of the run)")
        row(f"pypiserver-{backend}-simple-second", f"pypiserver {backend}: second GET /simple/")
        row(f"pypiserver-{backend}-project-first", f"pypiserver {backend}: first GET /simple/{a.sample_project}/")
        row(f"pypiserver-{backend}-page-mean", f"pypiserver {backend}: mean GET of another project page",
            f"{a.page_sample} pages spread over the index, each fetched once")
        row(f"pypiserver-{backend}-all-pages-est", f"pypiserver {backend}: every project page once (estimate)",
            f"mean page time x {res.meta['projects']} projects")
    row("quarry-serve-simple-first", "quarry serve: first GET …/simple/ (prebuilt page)")
    row("quarry-serve-project-first", f"quarry serve: first GET …/simple/{a.sample_project}/")
    row("quarry-upload", "quarry upload of 1 new wheel into the indexed root (command wall time)",
        "server " + ops_note("quarry-upload"))
    row("quarry-drop", "1 new wheel dropped in + quarry index", ops_note("quarry-drop"))
    row("dumb-pypi-incremental", "dumb-pypi --previous-package-list-json, +1 wheel")
    w("")
    w("Ratios (other / quarry, so >1 means quarry is faster):")
    w("")
    w("| ratio | value |")
    w("| --- | ---: |")

    def ratio(label: str, num: str, den: str) -> None:
        if num in res.rows and den in res.rows:
            w(f"| {label} | {med(num) / med(den):.2f} |")

    ratio("dumb-pypi full build / quarry index from scratch", "dumb-pypi", "quarry-scratch")
    ratio("dumb-pypi --no-per-release-json / quarry index from scratch",
          "dumb-pypi-no-per-release-json", "quarry-scratch")
    ratio("dumb-pypi full build / quarry index from scratch under eatmydata",
          "dumb-pypi", "quarry-scratch-nofsync")
    ratio("pypiserver simple-dir first /simple/ / quarry index from scratch",
          "pypiserver-simple-dir-simple-first", "quarry-scratch")
    ratio("pypiserver cached-dir first /simple/ / quarry index from scratch",
          "pypiserver-cached-dir-simple-first", "quarry-scratch")
    ratio("pypiserver simple-dir every project page (est.) / quarry index from scratch",
          "pypiserver-simple-dir-all-pages-est", "quarry-scratch")
    ratio("pypiserver cached-dir every project page (est.) / quarry index from scratch",
          "pypiserver-cached-dir-all-pages-est", "quarry-scratch")
    ratio("pypiserver simple-dir first /simple/ / quarry serve first /simple/ (prebuilt)",
          "pypiserver-simple-dir-simple-first", "quarry-serve-simple-first")
    ratio("pypiserver simple-dir project page / quarry serve project page (prebuilt)",
          "pypiserver-simple-dir-page-mean", "quarry-serve-project-first")
    ratio("dumb-pypi incremental +1 / quarry upload +1", "dumb-pypi-incremental", "quarry-upload")
    ratio("dumb-pypi incremental +1 / quarry drop + index +1", "dumb-pypi-incremental", "quarry-drop")
    w("")
    w("Incremental cost relative to the full reindex (quarry / quarry, <1 means cheaper than from scratch):")
    w("")
    w("| ratio | wall time | store ops |")
    w("| --- | ---: | ---: |")
    scratch_ops = res.rows["quarry-scratch"]["ops"][0]["total"]
    for name, label in (("quarry-upload", "upload +1 / from scratch"),
                        ("quarry-drop", "drop +1 + index / from scratch"),
                        ("quarry-noop", "no-op index / from scratch")):
        if name in res.rows:
            ops = res.rows[name]["ops"]
            mid = sorted(o["total"] for o in ops)[len(ops) // 2]
            w(f"| {label} | {med(name) / q:.4f} | {mid / scratch_ops:.4f} ({mid} / {scratch_ops}) |")
    w("")
    outs = res.meta.get("quarry_outputs")
    if outs:
        w(f"Quarry's outputs after the from-scratch index: state file {outs['state_file_bytes'] / 1e6:.1f} MB, "
          f"find-links index.html {outs['find_links_bytes'] / 1e6:.1f} MB, simple/ {outs['simple_dir_bytes'] / 1e6:.1f} MB, "
          f"{outs['metadata_sidecars']} .metadata sidecars. The state file and the find-links page are "
          "rewritten whole on every change.")
    if "quarry_serve_startup_seconds" in res.meta:
        w(f"quarry serve start-up on the indexed store (catch-up reindex, a no-op): "
          f"{res.meta['quarry_serve_startup_seconds']:.2f} s to the URL line.")
    w("")
    bg = res.meta.get("background_cores", {})
    if bg:
        w("Background load (cores busy with other work, 1 s sample before each section, out of 2): "
          + ", ".join(f"{k} {v:.2f}" for k, v in bg.items()) + ".")
        w("")
    if problems.items:
        w("Problems found:")
        for p in problems.items:
            w(f"- {p}")
    else:
        w("Checks: quarry's pages, hashes, requires-python, core-metadata and .metadata sidecars match "
          "the generator for every wheel; no-op reindex wrote nothing; uploads/drops appear on their "
          "project pages.")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quarry", type=Path, required=True)
    p.add_argument("--venv", type=Path, required=True)
    p.add_argument("--data", type=Path, required=True, help="gen_wheels.py output directory")
    p.add_argument("--work", type=Path, required=True, help="scratch directory")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--page-sample", type=int, default=25,
                   help="pypiserver project pages fetched per run to estimate the all-pages cost")
    p.add_argument("--eatmydata", type=Path,
                   help="also time quarry index from scratch under this eatmydata (fsync disabled)")
    p.add_argument("--results-json", type=Path)
    a = p.parse_args()

    global _pid_file
    a.work.mkdir(parents=True, exist_ok=True)
    _pid_file = a.work / "pids"
    atexit.register(_cleanup)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)

    manifest = json.loads((a.data / "manifest.json").read_text())
    expected = load_jsonl(a.data / "packages.jsonl")
    extra_rows = load_jsonl(a.data / "extra.jsonl")
    extra = [a.data / "extra" / r["filename"] for r in extra_rows]
    if len(extra) < 2 * a.runs:
        raise SystemExit(f"need {2 * a.runs} extra wheels, have {len(extra)} (gen_wheels.py --extra)")
    a.versions = manifest["versions_per_project"]
    a.sample_project = normalize(manifest["sample_project"])
    res = Results(meta={"wheels": manifest["wheels"], "projects": manifest["projects"],
                        "wheel_bytes_total": manifest["wheel_bytes_total"], "runs": a.runs})
    problems = Problems()
    wheels = a.data / "wheels"

    print("== quarry index from scratch", file=sys.stderr)
    res.quiet_check("quarry index from scratch")
    store = bench_quarry_scratch(a, res, wheels, expected, problems)
    print("== quarry index no-op", file=sys.stderr)
    res.quiet_check("quarry index no-op")
    bench_quarry_noop(a, res, store, problems)
    print("== dumb-pypi", file=sys.stderr)
    res.quiet_check("dumb-pypi")
    dumb_out = bench_dumb_pypi(a, res, a.data / "packages.jsonl", len(expected), problems)
    print("== dumb-pypi incremental", file=sys.stderr)
    res.quiet_check("dumb-pypi incremental")
    bench_dumb_pypi_incremental(a, res, a.data / "packages.jsonl", extra_rows, dumb_out)
    shutil.rmtree(dumb_out)
    print("== pypiserver", file=sys.stderr)
    res.quiet_check("pypiserver")
    bench_pypiserver(a, res, wheels, manifest["projects"], a.sample_project, problems)
    print("== quarry upload (quarry serve)", file=sys.stderr)
    res.quiet_check("quarry upload (quarry serve)")
    bench_quarry_upload(a, res, store, extra, problems)
    print("== quarry index after dropping one wheel", file=sys.stderr)
    res.quiet_check("quarry index after dropping one wheel")
    bench_quarry_drop(a, res, store, extra, problems)
    all_rows = expected + extra_rows[: 2 * a.runs]
    check_quarry_root(store / ROOT, all_rows, problems, "after the uploads and drops")

    text = report(a, res, problems)
    print(text)
    if a.results_json:
        a.results_json.write_text(json.dumps({"meta": res.meta, "rows": res.rows,
                                              "problems": problems.items}, indent=2) + "\n")
    return 1 if problems.items else 0


if __name__ == "__main__":
    sys.exit(main())
