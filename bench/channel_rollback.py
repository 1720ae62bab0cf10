"""A channel rollback on moto: `quarry channel rollback` of a small and a large channel (two
versions each: a run of PROJECTS x VERSIONS wheels promoted, then a run of 2 more). S3 requests
(moto's request log) and wall time of the rollback, beside the promotion that made the second
version (its page copies are what a version costs). Goal: the rollback's requests do not grow
with the channel. Prints a markdown report.

Run through bench/channel_rollback.sh (it provides the venv with boto3/moto and the binary)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import s3bench  # noqa: E402  (Server, generate, run_timed, fmt_requests, Procs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--quarry", required=True)
    ap.add_argument("--sizes", default="5x2,150x10", help="PROJECTSxVERSIONS, comma-separated")
    args = ap.parse_args()
    procs = s3bench.Procs(args.work)
    try:
        print("| channel | step | wall s | S3 requests (moto log) |\n| --- | --- | ---: | --- |")
        for size in args.sizes.split(","):
            projects, versions = (int(n) for n in size.split("x"))
            bench(args, procs, projects, versions)
        return 0
    finally:
        procs.stop_all()


def bench(args, procs, projects: int, versions: int) -> None:
    work = args.work / f"{projects}x{versions}"
    work.mkdir(parents=True, exist_ok=True)
    wheels, extra = s3bench.generate(work, projects, versions, 2)
    server = s3bench.Server("moto", work, procs)
    server.seed(wheels, "4242-linux/python/")
    server.seed(extra, "4243-linux/python/")
    env = server.env()
    bucket = f"s3://{s3bench.BUCKET}/"
    label = f"{len(wheels) + len(extra):,} wheels"

    def step(name: str, cmd: list[str], show: bool = True) -> None:
        mark = server.mark()
        result = s3bench.run_timed(cmd, env)  # exits naming the command if it fails
        ops = server.requests_since(mark)
        if show:
            print(f"| {label} | {name} | {result['wall']:.2f} | {s3bench.fmt_requests(ops)} |", flush=True)

    q = args.quarry
    step("quarry index (setup)", [q, "index", bucket], show=False)
    step("promote run 1 (version 1)", [q, "promote", "--from", "4242-linux", "--to", "nightly", "--kinds", "pip",
                                       "--store", bucket])
    step("promote run 2 (version 2)", [q, "promote", "--from", "4243-linux", "--to", "nightly", "--kinds", "pip",
                                       "--store", bucket])
    step("**quarry channel rollback**", [q, "channel", "rollback", "nightly", "--store", bucket])
    step("quarry channel rollback --to 2", [q, "channel", "rollback", "nightly", "--to", "2", "--store", bucket])
    server.proc.terminate()


if __name__ == "__main__":
    sys.exit(main())
