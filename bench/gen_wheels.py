#!/usr/bin/env python3
"""Write deterministic synthetic wheels for Quarry's indexer benchmarks.

Layout written under OUT:

  OUT/wheels/*.whl      PROJECTS x VERSIONS wheels (default 1,000 x 10 = 10,000)
  OUT/packages.jsonl    one JSON object per wheel, dumb-pypi's --package-list-json format
  OUT/extra/*.whl       EXTRA further wheels (new versions of existing projects), used for the
                        "one more upload" measurements; they are NOT in packages.jsonl
  OUT/extra.jsonl       the same JSON lines for the extra wheels
  OUT/manifest.json     parameters, counts, total bytes and a digest over all file hashes

Every wheel is a valid zip with `{dist}-{ver}.dist-info/METADATA` (Name, Version, and for two
projects in three a Requires-Python), WHEEL, RECORD (with correct hashes) and a module file.
Zip member timestamps and file mtimes are fixed, and the pseudo-random payload is derived from the
file name, so two runs with the same parameters write byte-identical files.

The JSON lines carry what dumb-pypi needs and cannot compute itself (it never opens the files):
"filename", "hash" ("sha256=<hex>" of the file), "requires_python", "core_metadata"
("sha256=<hex>" of the METADATA bytes, as served in a PEP 658 `.metadata` sidecar) and
"upload_timestamp" (integer seconds; also used as the file's mtime).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import os
import sys
import zipfile
from pathlib import Path

# Pre-, post- and final releases so version ordering matters on the project pages.
VERSIONS = [
    "0.1.0",
    "0.2.0",
    "0.9.0rc1",
    "1.0.0",
    "1.0.1",
    "1.1.0",
    "1.1.0.post1",
    "2.0.0a1",
    "2.0.0",
    "2.1.0",
]
EXTRA_VERSIONS = ["3.0.0", "3.0.1", "3.1.0", "3.2.0", "3.3.0", "3.4.0", "3.5.0", "3.6.0"]
REQUIRES_PYTHON = [">=3.8", ">=3.9,<4", None]
ZIP_DATE = (2024, 1, 1, 0, 0, 0)
BASE_TIMESTAMP = 1_704_067_200  # 2024-01-01T00:00:00Z


def project_name(i: int) -> tuple[str, str]:
    """(Name as written in METADATA, distribution name as written in the file name)."""
    # Some projects spell their name with mixed case and dots, as real projects do; the wheel
    # file name always uses the normalized-with-underscores form (PEP 427 / binary-distribution-format).
    if i % 7 == 3:
        display = f"Bench.Pkg-{i:04d}"
    else:
        display = f"bench-pkg-{i:04d}"
    dist = display.lower().replace("-", "_").replace(".", "_")
    return display, dist


def tag_for(i: int, j: int) -> str:
    # Mostly pure-Python wheels; one project in five ships CPython/Linux wheels.
    if i % 5 == 4:
        return "cp311-cp311-manylinux_2_28_x86_64"
    return "py3-none-any"


def record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def payload(seed: str, size: int) -> bytes:
    """Deterministic, incompressible bytes (so the wheel size is roughly `size`)."""
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(f"{seed}:{counter}".encode()).digest()
        counter += 1
    return bytes(out[:size])


def build_wheel(display: str, dist: str, version: str, tag: str, requires_python: str | None,
                payload_bytes: int) -> tuple[str, bytes, bytes]:
    """Return (filename, wheel bytes, METADATA bytes)."""
    filename = f"{dist}-{version}-{tag}.whl"
    distinfo = f"{dist}-{version}.dist-info"
    meta_lines = [
        "Metadata-Version: 2.1",
        f"Name: {display}",
        f"Version: {version}",
        f"Summary: Synthetic benchmark package {display} {version}",
        "License: Apache-2.0",
    ]
    if requires_python is not None:
        meta_lines.append(f"Requires-Python: {requires_python}")
    meta_lines.append("Requires-Dist: packaging>=20")
    metadata = ("\n".join(meta_lines) + "\n\nLong description of the benchmark package.\n").encode()
    pure = tag == "py3-none-any"
    wheel_file = (
        "Wheel-Version: 1.0\n"
        "Generator: quarry-bench-gen (1.0)\n"
        f"Root-Is-Purelib: {'true' if pure else 'false'}\n"
        f"Tag: {tag}\n"
    ).encode()
    module = f"{dist}/__init__.py"
    module_body = f'__version__ = "{version}"\n'.encode()
    data_member = f"{dist}/_data.bin"
    data_body = payload(filename, payload_bytes)

    members = [
        (module, module_body),
        (data_member, data_body),
        (f"{distinfo}/METADATA", metadata),
        (f"{distinfo}/WHEEL", wheel_file),
    ]
    record_lines = [f"{name},{record_hash(body)},{len(body)}" for name, body in members]
    record_lines.append(f"{distinfo}/RECORD,,")
    members.append((f"{distinfo}/RECORD", ("\n".join(record_lines) + "\n").encode()))

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, body in members:
            info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            info.create_system = 3  # unix, so external_attr is honoured the same everywhere
            zf.writestr(info, body)
    return filename, buf.getvalue(), metadata


def write_one(directory: Path, index: int, version_index: int, version: str, timestamp: int,
              payload_bytes: int) -> dict:
    display, dist = project_name(index)
    requires_python = REQUIRES_PYTHON[index % len(REQUIRES_PYTHON)]
    tag = tag_for(index, version_index)
    filename, data, metadata = build_wheel(display, dist, version, tag, requires_python,
                                           payload_bytes)
    path = directory / filename
    path.write_bytes(data)
    os.utime(path, (timestamp, timestamp))
    return {
        "filename": filename,
        "hash": "sha256=" + hashlib.sha256(data).hexdigest(),
        "requires_python": requires_python,
        "core_metadata": "sha256=" + hashlib.sha256(metadata).hexdigest(),
        "upload_timestamp": timestamp,
        "_size": len(data),
        "_project": display,
    }


def write_jsonl(path: Path, rows: list[dict]) -> None:
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps({k: v for k, v in row.items() if not k.startswith("_")}) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="output directory (created)")
    parser.add_argument("--projects", type=int, default=1000)
    parser.add_argument("--versions", type=int, default=10,
                        help=f"versions per project (at most {len(VERSIONS)})")
    parser.add_argument("--extra", type=int, default=6,
                        help=f"extra wheels for the upload measurements (at most {len(EXTRA_VERSIONS)})")
    parser.add_argument("--payload-bytes", type=int, default=2048,
                        help="incompressible bytes in each wheel's data file (wheel size ~ this + 1.5 KiB)")
    args = parser.parse_args(argv)
    if not 1 <= args.versions <= len(VERSIONS):
        parser.error(f"--versions must be 1..{len(VERSIONS)}")
    if not 0 <= args.extra <= len(EXTRA_VERSIONS):
        parser.error(f"--extra must be 0..{len(EXTRA_VERSIONS)}")
    if args.projects < 1:
        parser.error("--projects must be at least 1")

    wheels = args.out / "wheels"
    extra = args.out / "extra"
    for d in (wheels, extra):
        d.mkdir(parents=True, exist_ok=True)
        for old in d.glob("*.whl"):
            old.unlink()

    rows = []
    n = 0
    for i in range(args.projects):
        for j, version in enumerate(VERSIONS[: args.versions]):
            rows.append(write_one(wheels, i, j, version, BASE_TIMESTAMP + n, args.payload_bytes))
            n += 1
    write_jsonl(args.out / "packages.jsonl", rows)

    # Extra wheels: new versions of existing projects spread over the range (never new projects,
    # so the root-level simple/index.html stays unchanged and only one project page changes).
    extra_rows = []
    for k in range(args.extra):
        i = (k * 997 + 11) % args.projects
        extra_rows.append(write_one(extra, i, 0, EXTRA_VERSIONS[k],
                                    BASE_TIMESTAMP + n + 86_400 + k, args.payload_bytes))
    write_jsonl(args.out / "extra.jsonl", extra_rows)

    digest = hashlib.sha256("".join(r["hash"] for r in rows).encode()).hexdigest()
    manifest = {
        "projects": args.projects,
        "versions_per_project": args.versions,
        "wheels": len(rows),
        "wheel_bytes_total": sum(r["_size"] for r in rows),
        "payload_bytes": args.payload_bytes,
        "extra": [{"filename": r["filename"], "project": r["_project"]} for r in extra_rows],
        "sha256_of_hashes": digest,
        "sample_project": rows[0]["_project"],
    }
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {len(rows)} wheels ({manifest['wheel_bytes_total'] / 1e6:.1f} MB) over "
          f"{args.projects} projects and {len(extra_rows)} extra wheels into {args.out}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
