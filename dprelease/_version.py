"""The installed version, stated in every manifest."""

from __future__ import annotations

from functools import cache
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _installed


@cache
def version() -> str:
    """dprelease's version as installed, or "0.0.0+unknown" in a source tree never installed."""
    try:
        return _installed("dprelease")
    except PackageNotFoundError:
        return "0.0.0+unknown"
