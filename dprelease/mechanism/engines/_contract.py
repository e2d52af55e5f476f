"""The engine contract: what an engine is asked (`EngineJob`, whose `plan` is the row plan)
and what it hands back (`ExactAggregates` and the private `InputSummary`). Choosing an engine by
name is `_registry`'s, above the engines, so the contract imports none of them. An engine knows
nothing of noise or ledgers, and its output leaves the process only through `dprelease.publish`."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

import numpy as np
import polars as pl

from dprelease.mechanism.engines._inputs import DataSource
from dprelease.mechanism.engines._plan import DistinctUnits, RowPlan
from dprelease.period import Period
from dprelease.spec import ResolvedSpec


class Planned(Protocol):
    """What an engine is asked to aggregate: anything that makes a row plan of itself (an
    allocation of a release's statistics)."""

    def row_plan(self, resolved: ResolvedSpec, period: Period | None) -> RowPlan: ...


@dataclass(frozen=True, repr=False)  # no repr: its facts must not reach a log by accident
class InputSummary:
    """Private facts about the input, for the operator channel and the ledger only: never in
    a file, the manifest, published metadata or a message on the release path (PRIVACY.md).

    Every engine computes the same facts from the columns the spec reads, typed as for the
    aggregation; "the period" is the release's period, or every row for a spec without one.
    """

    rows: int  # rows of the input
    period_rows: int  # rows in the period
    unit_rows: int | None  # rows in the period whose privacy unit is not null (None: no unit)
    keyed_rows: Mapping[str, int]  # per key column: rows in the period whose key converted
    fingerprint: str  # `fingerprint` of the rows in the period
    #: per column read as a number: rows in the period without one (null, NaN, unreadable)
    missing_rows: Mapping[str, int] = field(default_factory=dict)

    def warnings(
        self,
        release: str,
        period: str | None,
        rules: Mapping[str, frozenset[str]] | None = None,
    ) -> list[str]:
        """What looks wrong with an input that was released anyway, for the operator channel
        only: no rows, no rows in the period, or no row of the period with a privacy unit or a
        usable key; a column read as a number with missing values, and what the `rules` of the
        statistics reading it (`ReleaseSpec.missing_rules`; absent: "fill") make of them:
        count them as 0 (or the statistic's lower bound) by the documented rule, or drop them.
        A release is made whatever they say (an empty period is a correct release of noise
        around 0)."""
        noise = "the released values are noise around 0"
        if self.rows == 0:
            return [f"release {release!r}: the input has no rows; {noise}. Check the input"]
        where = "" if period is None else f" of period {period}"
        if self.period_rows == 0:
            return [
                f"release {release!r}: no input row is in period {period}; {noise}. Check the "
                "period and the period column"
            ]
        found = []
        if self.unit_rows == 0:
            found.append(
                f"release {release!r}: every row{where} has a null privacy unit; such rows are "
                f"dropped, so {noise}. Check the privacy unit column"
            )
        for column, rows in self.keyed_rows.items():
            if rows == 0:
                found.append(
                    f"release {release!r}: no row{where} has a usable key in column {column!r} "
                    f"(all null, or not of the domain's key type); such rows are dropped, so "
                    f"{noise}"
                )
        for column, rows in self.missing_rows.items():
            if rows > 0:
                found.append(
                    f"release {release!r}: column {column!r} has no number in {rows:,} of "
                    f"{self.period_rows:,} rows{where} (null, NaN or unreadable); "
                    + _missing_rule_text((rules or {}).get(column, frozenset({"fill"})))
                )
        return found

    def added(self, other: InputSummary) -> InputSummary:
        """The summary of both inputs together (their fingerprint: of the two fingerprints)."""
        return _added_summaries(self, other)


def _missing_rule_text(rules: frozenset[str]) -> str:
    """What the statistics reading a column do with its rows without a number."""
    if rules == {"drop"}:
        return (
            "each statistic that reads it leaves them out (missing: drop): its sums, counts "
            "and histograms are of the rows with a value"
        )
    filled = (
        "counts them as 0, or as its lower bound when 0 is outside its bounds, which pulls its "
        "values toward that"
    )
    if "drop" in rules:
        return (
            f"the statistics with missing: drop leave them out; each other one {filled}. Set "
            "missing: drop on those too if the rows are not zeros"
        )
    return (
        f"each statistic that reads it {filled}. Set missing: drop on the statistic (or drop "
        "those rows before the release) if they are not zeros"
    )


def _added_summaries(a: InputSummary, b: InputSummary) -> InputSummary:
    units = None if a.unit_rows is None or b.unit_rows is None else a.unit_rows + b.unit_rows
    digest = hashlib.sha256(f"{a.fingerprint}|{b.fingerprint}".encode()).hexdigest()
    return InputSummary(
        rows=a.rows + b.rows,
        period_rows=a.period_rows + b.period_rows,
        unit_rows=units,
        keyed_rows={c: a.keyed_rows[c] + b.keyed_rows.get(c, 0) for c in a.keyed_rows},
        fingerprint=f"added:{digest}",
        missing_rows={c: n + b.missing_rows.get(c, 0) for c, n in a.missing_rows.items()},
    )


def fingerprint(scheme: str, rows: int, hash_sum: int) -> str:
    """The input fingerprint the ledger keeps: "<scheme>:<sha256>" of the number of rows in the
    period and the sum of a fixed-seed hash of each row (the columns the spec reads, typed), so
    row order does not matter. `scheme` names the engine and its hash function's version; two
    fingerprints are comparable only within one scheme."""
    digest = hashlib.sha256(f"{rows}:{hash_sum}".encode()).hexdigest()
    return f"{scheme}:{digest}"


@dataclass(frozen=True)
class ExactAggregates:
    """Pre-noise aggregates over the full public key grid; internal only, never published.

    `values` holds one Int128 series per aggregate the row plan names (rows for a count, the
    sum of integer units for a sum), aligned with `keys`, the public key grid (no columns when
    ungrouped: then every series has one cell). `histograms` holds, per histogram the plan
    names, the rows of each observed (cell, grid point) pair (Int64 columns `cell`, the row of
    `keys`; `point`, the grid index; `rows`). `summary` is the private input summary, computed
    in the same pass. Aggregates of disjoint inputs add up (`added`): a site's aggregates plus
    another site's are the pooled input's.
    """

    keys: pl.DataFrame
    values: Mapping[str, pl.Series]
    summary: InputSummary
    histograms: Mapping[str, pl.DataFrame] = field(default_factory=dict)

    def of(self, measurement: Any) -> pl.Series:
        """The exact aggregate of a measurement (anything with the `name` the plan gave it)."""
        return self.values[measurement.name]

    def added(self, other: ExactAggregates) -> ExactAggregates:
        """The aggregates of this input and `other` (disjoint rows, the same plan) together:
        integers add exactly (Int128 sums of at most 2^53 units per row cannot overflow)."""
        values = {name: series + other.values[name] for name, series in self.values.items()}
        histograms = {
            name: pl.concat([frame, other.histograms[name]])
            .group_by("cell", "point")
            .agg(pl.col("rows").sum())
            .sort("cell", "point")
            for name, frame in self.histograms.items()
        }
        return ExactAggregates(self.keys, values, self.summary.added(other.summary), histograms)


@dataclass(frozen=True)
class EngineJob:
    """What one aggregation is asked of an engine, the same for each of its steps (`check`,
    `aggregate`, `summarize`): the confidential input, the resolved spec (columns, key grid,
    contribution bounds), its allocation (which measurements and quantiles to aggregate) and
    the period whose rows count (None: every row)."""

    data: DataSource
    resolved: ResolvedSpec
    allocation: Planned
    period: Period | None

    @cached_property
    def plan(self) -> RowPlan:
        """The row plan of the allocation's aggregates over this period: all the engine runs."""
        return self.allocation.row_plan(self.resolved, self.period)


class Engine(Protocol):
    """An execution backend; every engine implements the same semantics (PRIVACY.md)."""

    name: str

    def check(self, job: EngineJob) -> None:
        """Everything that can be checked without reading a row; raises a typed error."""

    def aggregate(self, job: EngineJob, salt: int) -> ExactAggregates:
        """Exact aggregates and the input summary, in one pass over the input; contribution
        bounding hashes rows with `salt` (fresh per release)."""

    def summarize(self, job: EngineJob) -> InputSummary:
        """The input summary alone, for a re-run that returns a stored release."""

    def distinct_units(
        self, job: EngineJob, term: DistinctUnits, salt: int
    ) -> tuple[pl.DataFrame, np.ndarray]:
        """Key selection's aggregate (`DistinctUnits`): the candidate keys of one selected
        group-by entry, sorted, and units[k, g − 1]; each unit's G keys chosen with `salt`."""


def new_salt() -> int:
    """A fresh 64-bit salt from the OS CSPRNG: which rows a unit keeps is random, not file order,
    and cannot be predicted from the data."""
    return secrets.randbits(64)
