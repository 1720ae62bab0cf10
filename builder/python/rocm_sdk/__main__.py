"""``rocm-sdk``: version, paths, targets, devel unpacking and a self-test of the installed SDK."""

import argparse
import json
import sys

from . import __version__, _package_root, installed_packages
from ._dist_info import AVAILABLE_TARGET_FAMILIES, PACKAGES


def _root(expand=True):
    from ._devel import expand_devel

    devel = expand_devel() if expand else None
    if devel is not None:
        return devel
    core = _package_root(PACKAGES["core"][1])
    if core is None:
        sys.exit("rocm-sdk: rocm-sdk-core is not installed")
    return core


def _targets():
    core = _package_root(PACKAGES["core"][1])
    info = core / "share" / "therock" / "dist_info.json" if core else None
    if info is not None and info.is_file():
        return json.loads(info.read_text()).get("dist_amdgpu_targets", "")
    return ";".join(AVAILABLE_TARGET_FAMILIES)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="rocm-sdk", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("version", help="print the SDK version")
    path = sub.add_parser("path", help="print an SDK directory")
    which = path.add_mutually_exclusive_group(required=True)
    which.add_argument("--root", action="store_true")
    which.add_argument("--bin", action="store_true")
    which.add_argument("--cmake", action="store_true")
    sub.add_parser("targets", help="print the GPU targets this SDK was built for")
    sub.add_parser("packages", help="print the installed SDK packages and their directories")
    init = sub.add_parser("init", help="unpack the devel tree (rocm-sdk-devel)")
    init.add_argument("--quiet", action="store_true")
    sub.add_parser("test", help="check the installed SDK: versions agree, every library loads")
    args = parser.parse_args(argv)

    if args.command == "version":
        print(__version__)
    elif args.command == "path":
        root = _root()
        print(root if args.root else root / "bin" if args.bin else root / "lib" / "cmake")
    elif args.command == "targets":
        print(_targets())
    elif args.command == "packages":
        for logical, root in installed_packages().items():
            print(f"{logical}\t{root}")
    elif args.command == "init":
        from ._devel import expand_devel

        root = expand_devel()
        if not args.quiet:
            print(root if root is not None else "rocm-sdk-devel is not installed")
    elif args.command == "test":
        from ._selftest import run

        return run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
