"""The Python API a dataframe user meets (`import dprelease as dp`; docs/guide.md).

    spec = dp.ReleaseSpec.from_yaml("visits.yaml")           # or dp.ReleaseSpec(name=..., ...)
    dp.plan(spec, epsilon=0.5)                                # accuracy, before spending
    result = dp.release(df, spec, epsilon=0.5)                # exploration: nothing recorded
    result = dp.release(df, spec, epsilon=0.5, ledger="ledger.sqlite")  # charged, stored

With a ledger a release takes the one path the CLI and Dagster take (`publish.record_release`:
reserve → release → commit); without one nothing is recorded and the manifest says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from dprelease import planner
from dprelease.engines import DataSource
from dprelease.errors import ConfigError
from dprelease.ledger import Ledger
from dprelease.manifest import LegacyManifest, Manifest, parse_manifest
from dprelease.planner import ReleasePlan, StatisticAccuracy, accuracy_of
from dprelease.publish import record_release
from dprelease.pure_release import prepare
from dprelease.rational import Epsilon
from dprelease.spec import ReleaseSpec, resolve

if TYPE_CHECKING:
    import pandas as pd

#: A spec, or the path of its YAML file.
SpecLike = ReleaseSpec | str | Path

UNRECORDED = "not recorded in a ledger (exploration): nothing was charged; do not publish it"


@dataclass(frozen=True)
class ReleaseResult:
    """A release: its noisy table, its manifest, and what the ledger did (`status`)."""

    table: pl.DataFrame
    manifest: Manifest | LegacyManifest  # Legacy: a stored release of an earlier dprelease
    release_id: str | None  # the ledger slot (asset/period); None when nothing was recorded
    status: str  # in words: released and charged, stored copy returned, or not recorded
    charged: bool

    def to_pandas(self) -> pd.DataFrame:
        """The table as a pandas DataFrame (a mean's undefined cells are NaN there)."""
        return self.table.to_pandas()

    @property
    def accuracy(self) -> list[StatisticAccuracy]:
        """Per statistic: ε spent, Δ, noise scale and 95% margin of error (as `dp.plan`)."""
        if isinstance(self.manifest, LegacyManifest):
            raise ConfigError(
                "manifest",
                "this release was stored by an earlier dprelease (manifest format 1); its "
                "accuracy is in result.manifest",
            )
        return accuracy_of(self.manifest.statistics)


def _spec(spec: SpecLike) -> ReleaseSpec:
    return spec if isinstance(spec, ReleaseSpec) else ReleaseSpec.from_yaml(spec)


@contextmanager
def _opened(ledger: Ledger | str) -> Iterator[Ledger]:
    """The caller's ledger as it is, or an existing ledger by URL (never a new, empty one:
    a mistyped path must not look like a fresh budget), closed afterwards."""
    if isinstance(ledger, Ledger):
        yield ledger
        return
    with Ledger(ledger, mode="existing") as opened:
        yield opened


def release(
    data: DataSource,
    spec: SpecLike,
    *,
    epsilon: Epsilon,
    ledger: Ledger | str | None = None,
    scope: str | None = None,
    period: str | None = None,
    force_new: bool = False,
    engine: str | None = None,
) -> ReleaseResult:
    """Release `spec` from `data` (pandas or polars DataFrame, polars LazyFrame, pyarrow Table,
    or a parquet/CSV path) at `epsilon` (0.5, "1/12", a Fraction).

    With `ledger` (a `dp.Ledger` or its URL/path) the release is charged to `scope` (default:
    the spec's name; create it with `Ledger.ensure_scope`) and stored; a slot (spec, period)
    already released returns its stored copy and charges nothing. Without a ledger nothing is
    recorded: for exploring inside the secure environment, never for publication. Everything
    that can be wrong with the spec, ε, period or the input's declared schema raises a typed
    error before any budget is touched.
    """
    chosen = _spec(spec)
    prepared = prepare(data, resolve(chosen), epsilon, period=period, engine=engine)
    if ledger is None:
        if scope is not None or force_new:
            raise ConfigError("ledger", "scope and force_new need a ledger to charge")
        result = prepared.run()
        manifest = Manifest.model_validate(result.manifest)
        return ReleaseResult(result.table, manifest, None, UNRECORDED, charged=False)
    with _opened(ledger) as book:
        recorded = record_release(
            prepared,
            ledger=book,
            scope=scope or chosen.name,
            asset=chosen.name,
            force_new=force_new,
        )
    return ReleaseResult(
        recorded.table,
        parse_manifest(recorded.manifest),
        recorded.release_id,
        f"{recorded.release_id}: {recorded.describe()}",
        recorded.charged,
    )


def plan(
    spec: SpecLike, epsilon: Epsilon | None = None, *, targets: dict[str, float] | None = None
) -> ReleasePlan:
    """What a release of `spec` at `epsilon` will state per statistic (ε, Δ, scale, 95% margin
    of error; with margins each level's), without reading any data; with `targets` (name →
    wanted margin of the released cells; default: the spec's `target_moe95`) also the smallest
    ε that meets them, planned at when `epsilon` is None."""
    return planner.plan(_spec(spec), epsilon, targets=targets)
