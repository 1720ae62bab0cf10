"""Promote a 1,500-wheel kpack run into TheRock's v5 layout on moto: `quarry promote
--release-type dev` (CopyObject into the structured `whl-next/{project}/`, the run's index
entries carried, then the structured root's pages) against publish_rocm_to_release_buckets.py's
approach as its facts describe it: one CopyObject per object, sequentially, to
`whl-next/{pep503-name}/{file}`, then a full regeneration of the structured index the way
manage_structured.py does it server-side (list the root, one HEAD per file for its checksum,
one page PUT per project, the root page). Wall time and S3 requests (moto's request log).

Run through bench/promote_v5.sh (it provides the venv with boto3/moto and the binary)."""
from __future__ import annotations

import argparse
import html
import re
import sys
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import s3bench  # noqa: E402  (Server, generate, run_timed, fmt_requests, Procs, BUCKET)

RUN = "4242-linux"
PYTHON = f"{RUN}/python/"
V5 = "v5/rocm/core/"
PRESET = '[layout]\npreset = "therock-v5"\n'
# 2026-05-01: the promotion's date (only native repos are dated; this run has wheels only).
EPOCH = "1777593600"


def pep503(filename: str) -> str:
    return re.sub(r"[-_.]+", "-", filename.split("-", 1)[0]).lower()


def step(server, label: str, cmd: list[str], env: dict, rows: list[str]) -> tuple[float, int]:
    mark = server.mark()
    result = s3bench.run_timed(cmd, env)
    if result.get("returncode", 0) != 0:
        raise SystemExit(f"{label} failed:\n{result.get('stderr', '')}")
    ops = server.requests_since(mark)
    rows.append(f"| {label} | {result['wall']:.2f} | {s3bench.fmt_requests(ops)} |")
    return result["wall"], sum(ops.values())


def timed(server, label: str, fn, rows: list[str]) -> tuple[float, int]:
    mark = server.mark()
    t0 = time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    ops = server.requests_since(mark)
    rows.append(f"| {label} | {wall:.2f} | {s3bench.fmt_requests(ops)} |")
    return wall, sum(ops.values())


def copy_each(server, root: str) -> None:
    """One CopyObject per run object, in key order, to `{root}{pep503-name}/{file}`."""
    s3 = server.s3
    keys = sorted(k for k in server_keys(server, PYTHON) if k.endswith((".whl", ".tar.gz", ".zip")))
    for key in keys:
        name = key.rsplit("/", 1)[1]
        s3.copy_object(Bucket=s3bench.BUCKET, Key=f"{root}{pep503(name)}/{name}",
                       CopySource={"Bucket": s3bench.BUCKET, "Key": key})


def server_keys(server, prefix: str) -> list[str]:
    keys = []
    for page in server.s3.get_paginator("list_objects_v2").paginate(Bucket=s3bench.BUCKET, Prefix=prefix):
        keys += [o["Key"] for o in page.get("Contents", [])]
    return keys


def regenerate(server, root: str) -> None:
    """The structured index rebuilt whole: list the root, HEAD each file for its sha256, one page
    per project and the root page."""
    s3 = server.s3
    projects: dict[str, list[tuple[str, str]]] = {}
    for key in server_keys(server, root):
        rest = key[len(root):]
        parts = rest.split("/")
        if len(parts) != 2 or not parts[1].endswith((".whl", ".tar.gz", ".zip")):
            continue
        head = s3.head_object(Bucket=s3bench.BUCKET, Key=key, ChecksumMode="ENABLED")
        projects.setdefault(parts[0], []).append((parts[1], head.get("ChecksumSHA256", "")))
    for project, files in sorted(projects.items()):
        rows = "\n".join(f'    <a href="{urllib.parse.quote(f)}">{html.escape(f)}</a><br/>' for f, _ in sorted(files))
        body = f"<!DOCTYPE html>\n<html>\n  <body>\n    <h1>Links for {project}</h1>\n{rows}\n  </body>\n</html>"
        s3.put_object(Bucket=s3bench.BUCKET, Key=f"{root}{project}/index.html", Body=body.encode(),
                      ContentType="text/html", CacheControl="no-cache,no-store,must-revalidate")
    links = "\n".join(f'    <a href="{p}/">{p}</a><br/>' for p in sorted(projects))
    body = f"<!DOCTYPE html>\n<html>\n  <body>\n{links}\n  </body>\n</html>"
    s3.put_object(Bucket=s3bench.BUCKET, Key=f"{root}index.html", Body=body.encode(), ContentType="text/html",
                  CacheControl="no-cache,no-store,must-revalidate")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--quarry", required=True)
    ap.add_argument("--projects", type=int, default=150)
    ap.add_argument("--versions", type=int, default=10)
    args = ap.parse_args()
    procs = s3bench.Procs(args.work)
    try:
        return bench(args, procs)
    finally:
        procs.stop_all()


def bench(args, procs) -> int:
    wheels, _ = s3bench.generate(args.work, args.projects, args.versions, 0)
    server = s3bench.Server("moto", args.work, procs)
    server.seed(wheels, PYTHON)
    config = args.work / "v5.toml"
    config.write_text(PRESET)
    env = server.env()
    env["SOURCE_DATE_EPOCH"] = EPOCH
    bucket = f"s3://{s3bench.BUCKET}/"
    rows: list[str] = []
    step(server, "quarry index (the run, setup)", [args.quarry, "index", bucket, "--prefix", PYTHON], env, rows)
    promote = [args.quarry, "promote", "--from", RUN, "--to", V5, "--release-type", "dev", "--store", bucket,
               "--config", str(config)]
    q_wall, q_req = step(server, "**quarry promote --release-type dev**", promote, env, rows)
    listed = [k for k in server_keys(server, f"{V5}whl-next/") if k.endswith(".whl")]
    if len(listed) != len(wheels):
        raise SystemExit(f"promote placed {len(listed)} wheels, expected {len(wheels)}")
    other = "therock/" + V5 + "whl-next/"
    c_wall, c_req = timed(server, "TheRock: one CopyObject per object (sequential)",
                          lambda: copy_each(server, other), rows)
    i_wall, i_req = timed(server, "TheRock: full structured index regeneration (HEAD per file, PUT per page)",
                          lambda: regenerate(server, other), rows)
    r_wall, r_req = step(server, "quarry promote again (no-op)", promote, env, rows)
    base_wall, base_req = c_wall + i_wall, c_req + i_req
    print(f"## Promote {len(wheels):,} wheels into therock-v5 (whl-next/) on moto\n")
    print("| step | wall s | S3 requests (moto log) |\n| --- | ---: | --- |")
    print("\n".join(rows))
    print(f"\nquarry promote: {q_wall:.2f} s, {q_req:,} requests; copy per object + full regeneration: "
          f"{base_wall:.2f} s, {base_req:,} requests")
    print(f"ratio wall (TheRock's / promote, >1: promote faster): {base_wall / q_wall:.2f}x; "
          f"requests: {base_req / max(q_req, 1):.2f}x; re-promotion {r_wall:.2f} s, {r_req:,} requests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
