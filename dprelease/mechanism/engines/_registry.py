"""Choosing an engine by name. The registry sits above the engines it names (each imports the
contract below it), and imports each only when chosen: Spark is an optional extra, and a polars
release never pays for loading it."""

from __future__ import annotations

from collections.abc import Callable

from dprelease.errors import SpecError
from dprelease.mechanism.engines._contract import Engine


def _polars() -> Engine:
    from dprelease.mechanism.engines.polars import PolarsEngine

    return PolarsEngine()


def _spark() -> Engine:
    try:
        from dprelease.mechanism.engines.spark import SparkEngine
    except ModuleNotFoundError as missing:
        raise SpecError(
            "engine", f"the spark engine needs {missing.name}: pip install 'dprelease[spark]'"
        ) from None
    return SparkEngine()


#: Engines by name; each is imported only when chosen.
ENGINES: dict[str, Callable[[], Engine]] = {"polars": _polars, "spark": _spark}


def get_engine(name: str) -> Engine:
    """The engine called `name`; SpecError naming the choices otherwise."""
    if name not in ENGINES:
        raise SpecError("engine", f"unknown engine {name!r}; choose one of {sorted(ENGINES)}")
    return ENGINES[name]()
