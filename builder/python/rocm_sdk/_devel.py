"""Unpacks ``rocm_sdk_devel/_devel.tar`` into site-packages, once, and records the new files in
the devel distribution's RECORD so that ``pip uninstall`` removes them."""

import csv
import fcntl
import importlib.metadata
import tarfile

from . import _package_root
from ._dist_info import PACKAGES

MARKER = ".quarry-expanded"


def expand_devel():
    """The unpacked devel tree, or None when rocm-sdk-devel is not installed."""
    pure = _package_root("rocm_sdk_devel")
    if pure is None:
        return None
    site = pure.parent
    target = site / PACKAGES["devel"][1]
    if (target / MARKER).exists():
        return target
    tarball = pure / "_devel.tar"
    with open(pure / ".expand.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / MARKER).exists():
            return target
        with tarfile.open(tarball) as tar:
            members = tar.getmembers()
            if hasattr(tarfile, "data_filter"):
                tar.extractall(site, filter="data")
            else:
                for member in members:
                    if member.name.startswith("/") or ".." in member.name.split("/"):
                        raise RuntimeError(f"{tarball}: refusing {member.name}")
                tar.extractall(site)
        (target / MARKER).write_text("")
        rows = [m.name for m in members if not m.isdir()]
        rows += [f"{PACKAGES['devel'][1]}/{MARKER}", f"{pure.name}/.expand.lock"]
        _append_record("rocm-sdk-devel", rows)
    return target


def _append_record(dist_name, rows):
    dist = importlib.metadata.distribution(dist_name)
    for file in dist.files or []:
        if file.name == "RECORD" and file.parent.name.endswith(".dist-info"):
            with open(dist.locate_file(file), "a", newline="") as record:
                writer = csv.writer(record, lineterminator="\n")
                for row in rows:
                    writer.writerow([row, "", ""])
            return
