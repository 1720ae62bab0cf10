"""The ``rocm`` meta distribution. Runs on the installing machine: which device package the
``device`` extra means depends on that machine's GPU."""

import os
import subprocess
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent
INFO = {}
exec((HERE / "src" / "rocm_sdk" / "_dist_info.py").read_text(), INFO)
VERSION = INFO["__version__"]
PACKAGES = INFO["PACKAGES"]
AVAILABLE = INFO["AVAILABLE_TARGET_FAMILIES"]


def _offload_archs():
    try:
        out = subprocess.run(["offload-arch"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip().split(":")[0] for line in out.splitlines() if line.strip()]


def target_family():
    """ROCM_SDK_TARGET_FAMILY, else the first GPU offload-arch reports that this SDK supports
    (exactly, or as its `gfxNNX-*` family), else the build's default."""
    wanted = os.environ.get("ROCM_SDK_TARGET_FAMILY")
    if wanted:
        if wanted not in AVAILABLE:
            raise SystemExit(f"ROCM_SDK_TARGET_FAMILY={wanted} is not one of {AVAILABLE}")
        return wanted
    for arch in _offload_archs():
        candidates = [arch] + [f"{arch[:-1]}X{suffix}" for suffix in ("-all", "-dgpu", "-igpu", "-dcgpu")]
        for candidate in candidates:
            if candidate in AVAILABLE:
                return candidate
    return INFO["DEFAULT_TARGET_FAMILY"]


def requirement(logical):
    return f"{PACKAGES[logical][0]}=={VERSION}"


family = target_family()
extras = {}
if "libraries" in PACKAGES:
    extras["libraries"] = [requirement("libraries")]
elif family and f"libraries-{family}" in PACKAGES:
    extras["libraries"] = [requirement(f"libraries-{family}")]
devices = sorted(k for k in PACKAGES if k.startswith("device-"))
if family and f"device-{family}" in PACKAGES:
    extras["device"] = [requirement(f"device-{family}")]
for logical in devices:
    extras[logical] = [requirement(logical)]
if devices:
    extras["device-all"] = [requirement(d) for d in devices]
for logical in ("devel", "profiler"):
    if logical in PACKAGES:
        extras[logical] = [requirement(logical)]

setup(
    name="rocm",
    version=VERSION,
    description="ROCm SDK: the runtime, libraries and device code for this machine's GPUs",
    long_description=(HERE / "README.md").read_text(),
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    package_dir={"": "src"},
    packages=find_packages("src"),
    install_requires=[requirement("core")],
    extras_require=extras,
    entry_points={"console_scripts": ["rocm-sdk = rocm_sdk.__main__:main"]},
)
