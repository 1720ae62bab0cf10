"""``rocm-sdk test``: every installed SDK distribution has this SDK's version, and every shared
library of the installed packages loads (in rounds, so libraries that need others load after
them)."""

import ctypes
import importlib.metadata

from . import _WINDOWS, __version__, add_dll_directories, installed_packages
from ._dist_info import PACKAGES


def run():
    failures = []
    for logical, (dist, _import_name) in PACKAGES.items():
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        status = "ok" if version == __version__ else f"FAIL: version {version}, expected {__version__}"
        print(f"{dist}: {status}")
        if version != __version__:
            failures.append(dist)

    libraries = []
    add_dll_directories()
    pattern = "*.dll" if _WINDOWS else "*.so*"
    for root in dict.fromkeys(installed_packages().values()):
        libraries.extend(sorted(p for p in root.rglob(pattern) if p.is_file() and not p.is_symlink()))
    pending = list(libraries)
    while pending:
        left = []
        for path in pending:
            try:
                ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
            except OSError as error:
                left.append((path, error))
        if len(left) == len(pending):
            break
        pending = [p for p, _ in left]
    else:
        left = []
    for path, error in left:
        print(f"{path}: FAIL: {error}")
        failures.append(str(path))
    print(f"{len(libraries) - len(left)} of {len(libraries)} libraries load")
    return 1 if failures else 0
