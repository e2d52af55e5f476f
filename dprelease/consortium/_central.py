"""THE ADAPTER to dprelease's mechanism: everything the consortium needs from how a central
release is computed, and nothing else of the mechanism's internals is used anywhere else.

A consortium release is a central release whose exact aggregation and noise happen at the sites
and whose sum is decrypted once: the allocation (Δ, the split of ρ, granularity), the engines'
exact integer aggregates, and the post-processing of noisy integer vectors into released columns
and a manifest are the central release's own. What this module depends on:

- `mechanism.allocate` → `Allocation` (`measurements`, `statistics`), and its `Measurement`
  fields `name`, `counts_rows`, `lower_units`, `upper_units`, `sensitivity_units`,
  `sensitivity_squared_units`, `loss`, `sigma2_units`, `derivation`, `moe95`, `variance`
  (a dataclass: the pooled law is a subclass that overrides the last two);
- `mechanism.check_input`, and an engine's `aggregate(EngineJob, salt)` → `ExactAggregates`
  (`.keys`, `.of(measurement)`, `.summary.warnings`);
- `mechanism._postprocess.from_noisy` and `columns` (noisy integer vectors → released columns);
- `statement.build_manifest`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from fractions import Fraction

import polars as pl

from dprelease import operator
from dprelease.change import ProtectedChange
from dprelease.loss import Mechanism, PrivacyLoss
from dprelease.mechanism import Allocation, DataSource, Measurement, allocate, check_input
from dprelease.mechanism import StatisticAllocation as _StatisticAllocation
from dprelease.mechanism._postprocess import columns, from_noisy
from dprelease.mechanism.engines import EngineJob, get_engine, new_salt
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


def unsupported(resolved: ResolvedSpec) -> tuple[str, str] | None:
    """(YAML path, why) for what a consortium release cannot do yet, else None."""
    spec = resolved.spec
    if spec.margins:
        return "release.margins", "a consortium release has no margins yet; remove `margins:`"
    for index, stat in enumerate(spec.statistics):
        if stat.kind.value == "quantile":
            return (
                f"release.statistics[{index}]",
                "a consortium release has no quantiles yet; release counts, sums and means",
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
    """The input's declared schema against the spec (reads no row)."""
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
    exact = get_engine(engine).aggregate(EngineJob(data, resolved, allocation, period), new_salt())
    shown = None if period is None else str(period)
    for message in exact.summary.warnings(resolved.spec.name, shown):
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


def central_measurements(allocation: Allocation) -> list[CentralMeasurement]:
    """The central allocation's measurements, in its order, as the consortium reads them."""
    made = []
    for m in allocation.measurements:
        assert m.sensitivity_squared_units is not None  # Gaussian noise
        units = 1 if m.counts_rows else max(abs(m.lower_units), abs(m.upper_units))
        made.append(
            CentralMeasurement(
                m.name,
                m.sensitivity_units,
                m.sensitivity_squared_units,
                m.loss.rho,
                units,
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


@dataclass(frozen=True, kw_only=True)
class _PooledMeasurement(Measurement):
    """A measurement whose noise is a sum of shares: its margin of error and variance are read
    from the exact law of that sum, not from one discrete Gaussian."""

    share_sigma2: Fraction = Fraction(1)
    parties: int = 1

    @property
    def moe95(self) -> float:
        return summed_gaussian_moe95(self.share_sigma2, self.parties) * float(self.granularity)

    @property
    def variance(self) -> float:
        units = summed_gaussian_variance(self.share_sigma2, self.parties)
        return units * float(self.granularity) ** 2


def pooled_allocation(allocation: Allocation, laws: Mapping[str, PooledLaw]) -> Allocation:
    """The central allocation with each measurement's noise replaced by its pooled law: Δ as the
    consortium bounds it, σ² = parties · share σ² (the sum's variance parameter)."""
    made = {
        m.name: _PooledMeasurement(
            **{
                **{f: getattr(m, f) for f in m.__dataclass_fields__},
                "sensitivity_units": laws[m.name].delta1_units,
                "sensitivity_squared_units": laws[m.name].delta2_squared_units,
                "derivation": laws[m.name].derivation,
                "sigma2_units": laws[m.name].parties * laws[m.name].share_sigma2,
            },
            share_sigma2=laws[m.name].share_sigma2,
            parties=laws[m.name].parties,
        )
        for m in allocation.measurements
    }
    statistics = [
        replace(
            a,
            measurement=made[a.measurement.name],
            count=None if a.count is None else made[a.count.name],
        )
        if isinstance(a, _StatisticAllocation)
        else a
        for a in allocation.statistics
    ]
    return replace(allocation, statistics=statistics, measurements=list(made.values()))


def noisy_table(
    resolved: ResolvedSpec, allocation: Allocation, totals: Mapping[str, list[int]]
) -> pl.DataFrame:
    """The released table from the decrypted noisy totals (integer units per measurement), by
    the central release's post-processing: clamping, scaling, means, rounding."""
    post = resolved.spec.postprocess
    noisy = {m.name: pl.Series(totals[m.name], dtype=pl.Int128) for m in allocation.measurements}
    measured = from_noisy(allocation.measurements, noisy, post)
    made = [
        col
        for a in allocation.statistics
        if isinstance(a, _StatisticAllocation)
        for col in columns(a, measured, post)
    ]
    return pl.DataFrame([*resolved.key_grid.get_columns(), *made])


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
