"""THE ADAPTER to dprelease's mechanism: everything the consortium needs from how a central
release is computed, and nothing else of the mechanism is used anywhere else in the consortium.

A consortium release is a central release whose exact aggregation and noise happen at the sites
and whose sum is decrypted once: the allocation (Δ, the split of ρ, granularity), the row plan's
exact integer aggregates, and the post-processing of noisy integer vectors into released columns
and a manifest are the central release's own. It uses only the mechanism's face:

- `allocate` → `Allocation`: its `measurements` (each a `Measurement`: `name`, `loss`,
  `sensitivity_units`, `sensitivity_squared_units`, `derivation`, `sigma2_units`, `moe95`,
  `variance`, `granularity`), its `statistics` (each an `Allocated`: `histograms`, whose
  non-empty answer means a selection mechanism on exact aggregates, which no site may draw) and
  its `row_plan` (each sum's `Units` bounds what one row adds to a cell);
- `check_input` and `aggregate` → `ExactAggregates` (`.keys`, `.of(measurement)`,
  `.summary.warnings`): a site's exact integers, which add up across sites;
- `released_table` (noisy integer vectors → released columns) and `statement.build_manifest`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, make_dataclass, replace
from fractions import Fraction
from typing import Any

import polars as pl

from dprelease import operator
from dprelease.change import ProtectedChange
from dprelease.loss import Mechanism, PrivacyLoss
from dprelease.mechanism import (
    Allocated,
    Allocation,
    DataSource,
    Measurement,
    aggregate,
    allocate,
    check_input,
    released_table,
)
from dprelease.mechanism.noise import summed_gaussian_moe95, summed_gaussian_variance
from dprelease.period import Period
from dprelease.spec import ResolvedSpec
from dprelease.statement import Manifest, NoiseSourceEntry, build_manifest

__all__ = [
    "Allocation",
    "CentralMeasurement",
    "PooledLaw",
    "central_allocation",
    "central_measurements",
    "check_site_input",
    "exact_vectors",
    "manifest_for",
    "noisy_table",
    "pooled_allocation",
    "unsupported",
]


def unsupported(resolved: ResolvedSpec, allocation: Allocation) -> tuple[str, str] | None:
    """(YAML path, why) for what a consortium release cannot do yet, else None: margins, and any
    statistic whose share is spent by a selection mechanism on exact aggregates (its row-plan
    histograms), which only a curator who sees the pooled exact values could draw."""
    if resolved.spec.margins:
        return "release.margins", "a consortium release has no margins yet; remove `margins:`"
    reads = allocation.row_plan(resolved, None).reads
    for index, allocated in enumerate(allocation.statistics):
        if allocated.histograms(list(reads)):
            return (
                f"release.statistics[{index}]",
                f"a consortium release cannot draw {allocated.statistic.kind.value}s (a "
                "selection on the pooled exact values); release counts, sums, means and shares",
            )
    return None


def central_allocation(
    resolved: ResolvedSpec, rho: Fraction, change: ProtectedChange
) -> Allocation:
    """The central release's allocation of ρ with Gaussian noise: Δ1, Δ2², granularity and the
    share of ρ of every measurement (its σ² is the central one; the pooled law replaces it)."""
    return allocate(resolved, PrivacyLoss.zcdp(rho), change, Mechanism.GAUSSIAN)


def check_site_input(
    data: DataSource,
    resolved: ResolvedSpec,
    allocation: Allocation,
    period: Period | None,
    engine: str,
) -> None:
    """The input's declared schema against the row plan (reads no row)."""
    check_input(data, resolved, allocation, period, engine)


def exact_vectors(
    data: DataSource,
    resolved: ResolvedSpec,
    allocation: Allocation,
    period: Period | None,
    engine: str,
) -> dict[str, list[int]]:
    """One site's exact integer aggregates per measurement over the public key grid (private:
    they leave this function only with the site's noise share added, encrypted). Data-dependent
    warnings go to the operator channel."""
    exact = aggregate(data, resolved, allocation, period, engine)
    shown = None if period is None else str(period)
    for message in exact.summary.warnings(resolved.spec.name, shown, resolved.spec.missing_rules()):
        operator.warn(message)
    if not exact.keys.equals(resolved.key_grid):
        raise AssertionError("internal: the engine's keys are not the public key grid")
    return {m.name: [int(v) for v in exact.of(m).to_list()] for m in allocation.measurements}


@dataclass(frozen=True)
class CentralMeasurement:
    """What the consortium reads of one measurement of the central allocation: its name, Δ1
    and Δ2² in integer units, its share of ρ, the most one row adds to a cell (U, in units),
    and how Δ follows from the spec."""

    name: str
    delta1: int
    delta2_squared: int
    rho: Fraction
    units_bound: int
    derivation: str


def central_measurements(
    resolved: ResolvedSpec, allocation: Allocation
) -> list[CentralMeasurement]:
    """The central allocation's measurements, in its order, as the consortium reads them; U is
    read from the row plan (a sum's `Units` range; a count of rows adds 1)."""
    sums = {u.name: u for u in allocation.row_plan(resolved, None).sums}
    made = []
    for m in allocation.measurements:
        assert m.sensitivity_squared_units is not None  # Gaussian noise
        units = sums.get(m.name)
        bound = 1 if units is None else max(abs(units.lower_units), abs(units.upper_units))
        made.append(
            CentralMeasurement(
                m.name,
                m.sensitivity_units,
                m.sensitivity_squared_units,
                m.loss.rho,
                bound,
                m.derivation,
            )
        )
    return made


@dataclass(frozen=True)
class PooledLaw:
    """The noise of one measurement in the decrypted total: the sum of `parties` iid
    N_Z(0, share_sigma2) shares, with sensitivities multiplied by max_sites_per_unit."""

    share_sigma2: Fraction
    parties: int
    delta1_units: int
    delta2_squared_units: int
    derivation: str


class _Pooled:
    """Mixed into a measurement's own class: its noise is a sum of shares, so its margin of error
    and variance are read from the exact law of that sum, not from one discrete Gaussian."""

    share_sigma2: Fraction
    parties: int
    granularity: Fraction

    @property
    def moe95(self) -> float:
        return summed_gaussian_moe95(self.share_sigma2, self.parties) * float(self.granularity)

    @property
    def variance(self) -> float:
        units = summed_gaussian_variance(self.share_sigma2, self.parties)
        return units * float(self.granularity) ** 2


_POOLED_CLASSES: dict[type[Measurement], Any] = {}


def _pooled_class(cls: type[Measurement]) -> Any:
    """`cls` (a `Measurement` or a kind's subclass of it, whose row recipe it keeps) with the
    pooled law's margin and variance: made once per class."""
    if cls not in _POOLED_CLASSES:
        _POOLED_CLASSES[cls] = make_dataclass(
            f"Pooled{cls.__name__}",
            [("share_sigma2", Fraction), ("parties", int)],
            bases=(_Pooled, cls),
            frozen=True,
            kw_only=True,
        )
    return _POOLED_CLASSES[cls]


def _pooled(m: Measurement, law: PooledLaw) -> Measurement:
    kept = {f.name: getattr(m, f.name) for f in fields(m) if f.init}
    made: Measurement = _pooled_class(type(m))(
        **{
            **kept,
            "sensitivity_units": law.delta1_units,
            "sensitivity_squared_units": law.delta2_squared_units,
            "derivation": law.derivation,
            "sigma2_units": law.parties * law.share_sigma2,
        },
        share_sigma2=law.share_sigma2,
        parties=law.parties,
    )
    return made


def _with_measurements(allocated: Allocated, made: Mapping[str, Measurement]) -> Allocated:
    """`allocated` reading the pooled measurements: every field that holds a measurement (a
    count's or sum's own, a mean's or share's numerator and count) is replaced by name."""
    swapped: dict[str, Any] = {
        f.name: made[value.name]
        for f in fields(allocated)
        if isinstance(value := getattr(allocated, f.name), Measurement)
    }
    return replace(allocated, **swapped)


def pooled_allocation(allocation: Allocation, laws: Mapping[str, PooledLaw]) -> Allocation:
    """The central allocation with each measurement's noise replaced by its pooled law: Δ as the
    consortium bounds it, σ² = parties · share σ² (the sum's variance parameter)."""
    made = {m.name: _pooled(m, laws[m.name]) for m in allocation.measurements}
    statistics = [_with_measurements(a, made) for a in allocation.statistics]
    return replace(allocation, statistics=statistics, measurements=list(made.values()))


def noisy_table(
    resolved: ResolvedSpec, allocation: Allocation, totals: Mapping[str, list[int]]
) -> pl.DataFrame:
    """The released table from the decrypted noisy totals (integer units per measurement), by
    the central release's post-processing (`released_table`): clamping, scaling, means,
    rounding. No statistic of a consortium release has a selection (`unsupported`)."""
    noisy = {m.name: (pl.Series(totals[m.name], dtype=pl.Int128),) for m in allocation.measurements}
    table, _ = released_table(resolved, allocation, None, noisy, {})
    return table


def manifest_for(
    resolved: ResolvedSpec,
    allocation: Allocation,
    change: ProtectedChange,
    period: Period | None,
    delta: float | None,
    engine: str,
    bits: str,
    seeded: bool,
) -> Manifest:
    """The central release's manifest of the pooled allocation; `bits` names the sites' noise
    sources (private only if none was seeded)."""
    return build_manifest(
        resolved,
        allocation,
        change,
        None if period is None else str(period),
        engine,
        None,
        NoiseSourceEntry(bits=bits, seeded=seeded, private=not seeded),
        delta,
    )
