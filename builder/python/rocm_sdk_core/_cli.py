"""Console scripts of rocm-sdk-core: each runs the tool of the same name from the unpacked devel
tree when rocm-sdk-devel is installed, else from the core package."""

import os
import sys
from pathlib import Path

from ._dist_info import CORE_SCRIPTS, PACKAGES


def _exec(function):
    relpath = CORE_SCRIPTS[function]
    try:
        from rocm_sdk._devel import expand_devel

        root = expand_devel()
    except ImportError:
        root = None
    if root is None:
        root = Path(__file__).resolve().parent.parent / PACKAGES["core"][1]
    tool = root / relpath
    if not tool.is_file():
        sys.exit(f"{tool.name}: not part of this ROCm SDK ({tool} is missing)")
    os.execv(tool, [str(tool), *sys.argv[1:]])


def _make(function):
    def run():
        _exec(function)

    run.__name__ = function
    return run


for _function in CORE_SCRIPTS:
    globals()[_function] = _make(_function)
