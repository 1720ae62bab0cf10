"""Promote a 1,500-object run on moto: `quarry promote` (CopyObject, then reindexing the
channel's roots) against `aws s3 cp --recursive` of the same files plus `quarry index` of the
copy. Wall time and S3 requests (moto's request log) for each; prints a markdown report.

Run through bench/promote.sh (it provides the venv with awscli/boto3/moto and the binary)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import s3bench  # noqa: E402  (Server, generate, run_timed, fmt_requests, Procs)

RUN = "4242-linux/python/"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--quarry", required=True)
    ap.add_argument("--aws", required=True)
    ap.add_argument("--projects", type=int, default=150)
    ap.add_argument("--versions", type=int, default=10)
    args = ap.parse_args()
    procs = s3bench.Procs(args.work)
    try:
        return bench(args, procs)
    finally:
        procs.stop_all()


def step(server, label: str, cmd: list[str], env: dict, rows: list[str]) -> tuple[float, int]:
    mark = server.mark()
    result = s3bench.run_timed(cmd, env)
    ops = server.requests_since(mark)
    rows.append(f"| {label} | {result['wall']:.2f} | {s3bench.fmt_requests(ops)} |")
    return result["wall"], sum(ops.values())


def bench(args, procs) -> int:
    wheels, _ = s3bench.generate(args.work, args.projects, args.versions, 0)
    server = s3bench.Server("moto", args.work, procs)
    server.seed(wheels, RUN)
    env = server.env()
    bucket = f"s3://{s3bench.BUCKET}/"
    rows: list[str] = []
    step(server, "quarry index (the run, setup)", [args.quarry, "index", bucket, "--prefix", RUN], env, rows)
    q_wall, q_req = step(server, "**quarry promote** --to nightly",
                         [args.quarry, "promote", "--from", "4242-linux", "--to", "nightly", "--kinds", "pip",
                          "--store", bucket], env, rows)
    a_wall, a_req = step(server, "aws s3 cp --recursive (run → channel-cp/python/)",
                         [args.aws, "s3", "cp", "--recursive", "--quiet", f"{bucket}{RUN}",
                          f"{bucket}channel-cp/python/", "--exclude", "*", "--include", "*.whl"], env, rows)
    i_wall, i_req = step(server, "quarry index (the copy)",
                         [args.quarry, "index", bucket, "--prefix", "channel-cp/python/"], env, rows)
    r_wall, r_req = step(server, "quarry promote again (no-op)",
                         [args.quarry, "promote", "--from", "4242-linux", "--to", "nightly", "--kinds", "pip",
                          "--store", bucket], env, rows)
    base_wall, base_req = a_wall + i_wall, a_req + i_req
    print(f"## Promote {len(wheels):,} wheels on moto\n")
    print("| step | wall s | S3 requests (moto log) |\n| --- | ---: | --- |")
    print("\n".join(rows))
    print(f"\nquarry promote: {q_wall:.2f} s, {q_req:,} requests; aws s3 cp --recursive + quarry index: "
          f"{base_wall:.2f} s, {base_req:,} requests")
    print(f"ratio wall (aws+index / promote, >1: promote faster): {base_wall / q_wall:.2f}x; "
          f"requests: {base_req / max(q_req, 1):.2f}x; re-promotion {r_wall:.2f} s, {r_req:,} requests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
