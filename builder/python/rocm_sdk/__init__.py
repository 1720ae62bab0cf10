"""ROCm SDK for Python: find and load the libraries the rocm-sdk wheels installed.

The wheels put each distribution's files in a platform package (``_rocm_sdk_core``,
``_rocm_sdk_libraries``, ...). Their shared libraries carry no RPATH to one another, so a
process loads them through :func:`preload_libraries` (``RTLD_GLOBAL``) before using them.

On Windows the DLLs are in each package's ``bin`` directory (``_rocm_sdk_core/bin/amdhip64_7.dll``,
as TheRock's Windows artifacts hold them); :func:`add_dll_directories` registers every one of
those directories with ``os.add_dll_directory`` before a DLL is loaded, so a DLL of one package
finds the DLLs it imports from another.
"""

import ctypes
import importlib.util
import os
import re
import warnings
from pathlib import Path

from ._dist_info import (  # noqa: F401
    AVAILABLE_TARGET_FAMILIES,
    DEFAULT_TARGET_FAMILY,
    PACKAGES,
    __version__,
)

_LOADED = {}
_DLL_DIRECTORIES = {}
_WINDOWS = os.name == "nt"


def _package_root(import_name):
    spec = importlib.util.find_spec(import_name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def installed_packages():
    """Logical name (``core``, ``libraries``, ``device-gfx942``, ...) -> directory, for every
    package of this SDK that is installed (the devel tree only once unpacked)."""
    out = {}
    for logical, (_dist, import_name) in PACKAGES.items():
        root = _package_root(import_name)
        if root is not None and (logical != "devel" or (root / ".quarry-expanded").exists()):
            out[logical] = root
    return out


def _library_globs(name):
    """Where a library is, relative to a package: ``bin/{name}*.dll`` on Windows (``amdhip64_7.dll``),
    else ``lib/lib{name}.so*``."""
    if _WINDOWS:
        return ("bin", f"{name}*.dll")
    return ("lib", f"lib{name}.so*")


def find_libraries(*shortnames):
    """Paths of ``lib{name}.so*`` (Windows: ``{name}*.dll``), one per name, in the installed
    packages, core first."""
    roots = list(dict.fromkeys(installed_packages().values()))
    found = []
    for name in shortnames:
        subdir, pattern = _library_globs(name)
        matches = []
        for root in roots:
            matches.extend(sorted(p for p in (root / subdir).glob(pattern) if p.is_file()))
        if not matches:
            raise ModuleNotFoundError(f"{pattern} is not in any installed ROCm SDK package")
        found.append(matches[0])
    return found


def add_dll_directories():
    """Windows: every installed package's ``bin`` directory added to the DLL search path
    (``os.add_dll_directory``), once per process; returns the directories. Elsewhere a no-op."""
    if not _WINDOWS:
        return []
    for root in dict.fromkeys(installed_packages().values()):
        bin_dir = root / "bin"
        if bin_dir.is_dir() and str(bin_dir) not in _DLL_DIRECTORIES:
            _DLL_DIRECTORIES[str(bin_dir)] = os.add_dll_directory(str(bin_dir))
    return list(_DLL_DIRECTORIES)


def preload_libraries(*shortnames, rtld_global=True):
    """Loads ``lib{name}.so`` (Windows: ``{name}*.dll``) for each name, once per process."""
    mode = ctypes.RTLD_GLOBAL if rtld_global else ctypes.RTLD_LOCAL
    add_dll_directories()
    handles = []
    for path in find_libraries(*shortnames):
        key = str(path)
        if key not in _LOADED:
            _LOADED[key] = ctypes.CDLL(key, mode=mode)
        handles.append(_LOADED[key])
    return handles


def _version_matches(pattern):
    if "*" in pattern:
        return re.fullmatch(re.escape(pattern).replace(r"\*", ".*"), __version__) is not None
    return re.fullmatch(pattern, __version__) is not None


def initialize_process(
    preload_shortnames=(),
    rtld_global=True,
    env_override=True,
    check_version=None,
    fail_on_version_mismatch=False,
):
    """Preloads libraries (plus ``ROCM_SDK_PRELOAD_LIBRARIES``, ``,``/``;`` separated) and
    optionally checks the SDK version against a glob (``7.1.*``) or regular expression."""
    if check_version is not None and not _version_matches(check_version):
        message = f"ROCm SDK {__version__} does not match {check_version!r}"
        if fail_on_version_mismatch:
            raise RuntimeError(message)
        warnings.warn(message, stacklevel=2)
    names = list(preload_shortnames)
    if env_override:
        names.extend(n.strip() for n in re.split("[,;]", os.environ.get("ROCM_SDK_PRELOAD_LIBRARIES", "")) if n.strip())
    return preload_libraries(*names, rtld_global=rtld_global)
