"""dprelease: differentially private grouped counts and sums with a persistent budget ledger.

The library imports no Dagster; `pipelines/` is the Dagster code location built on it.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("dprelease")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"
