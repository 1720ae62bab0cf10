"""A ROCm SDK distribution built by Quarry. Its files live in the sibling platform package."""

from ._dist_info import __version__  # noqa: F401
