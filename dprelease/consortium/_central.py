"""THE ADAPTER to dprelease's mechanism: everything the consortium needs from how a central
release is computed, and nothing else of the mechanism is used anywhere else in the consortium.

A consortium release is a central release whose exact aggregation and noise happen at the sites
and whose sum is decrypted once: the allocation (Δ, the split of ρ over statistics and over the
levels of a release with margins, granularity), the row plan's exact integer aggregates (and
each margin's, summed from them), and the post-processing of noisy integer vectors into
released columns (with margins: the consistent table, its margins of error and controlled
rounding) and a manifest are the central release's own. It uses only the mechanism's faces:

- `allocate` → `Allocation`: its `measurements` (each a `Measurement`: `name`, `levels` — the
  cells, then each margin, each a `LevelNoise` with `loss`, `sensitivity_units`,
  `sensitivity_squared_units`, `derivation`, `sigma2_units`, `parties` — and `margins`), its
  `statistics` (each an `Allocated`: `histograms`, whose non-empty answer means a selection
  mechanism on exact aggregates, which no site may draw) and its `row_plan` (each sum's `Units`
  bounds what one row adds to a cell);
- `check_input` and `aggregate` → `ExactAggregates` (`.keys`, `.of(measurement)`,
  `.summary.warnings`): a site's exact integers, which add up across sites; `margins.level_sums`
  for each margin's exact rows;
- `margin_accuracy` and `released_table` (noisy integer vectors at every level → released
  columns), `statement.build_manifest` and `statement.with_outcome`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from fractions import Fraction
from typing import Any, TypeVar

import polars as pl

from dprelease import operator
from dprelease.change import ProtectedChange
from dprelease.loss import Measure, Mechanism, PrivacyLoss
from dprelease.mechanism import (
    Allocated,
    Allocation,
    DataSource,
    LevelNoise,
    MarginAccuracy,
    Measurement,
    Outcome,
    aggregate,
    allocate,
    check_input,
    margin_accuracy,
    noise_family,
    released_table,
)
from dprelease.mechanism.margins import level_sums
from dprelease.period import Period
from dprelease.spec import ResolvedSpec
from dprelease.statement import Manifest, NoiseSourceEntry, build_manifest, with_outcome

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
    "pooled_margins",
    "unsupported",
]


def unsupported(resolved: ResolvedSpec, allocation: Allocation) -> tuple[str, str] | None:
    """(YAML path, why) for what a consortium release cannot do, else None: any statistic whose
    share is spent by a selection mechanism on exact aggregates (its row-plan histograms), which
    only a curator who sees the pooled exact values could draw."""
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
) -> dict[str, list[list[int]]]:
    """One site's exact integer aggregates per measurement over the public key grid, at every
    level (the cells, then each margin's rows, each the exact sum of its cells), as the central
    release measures them (private: they leave this function only with the site's noise share
    added, encrypted). Data-dependent warnings go to the operator channel."""
    exact = aggregate(data, resolved, allocation, period, engine)
    shown = None if period is None else str(period)
    for message in exact.summary.warnings(resolved.spec.name, shown, resolved.spec.missing_rules()):
        operator.warn(message)
    if not exact.keys.equals(resolved.key_grid):
        raise AssertionError("internal: the engine's keys are not the public key grid")
    vectors = {}
    for m in allocation.measurements:
        cells = exact.of(m)
        levels = [cells] if resolved.levels is None else level_sums(cells, resolved.levels)
        vectors[m.name] = [[int(v) for v in level.to_list()] for level in levels]
    return vectors


@dataclass(frozen=True)
class CentralMeasurement:
    """What the consortium reads of one level of one measurement of the central allocation: its
    name and level (0: the cells; k: the k-th margin, `label` its key columns or "total"), its
    rows, Δ1 and Δ2² in integer units, its share of ρ, the most one row adds to a cell (U, in
    units), and how Δ follows from the spec."""

    name: str
    level: int
    label: str | None
    cells: int
    delta1: int
    delta2_squared: int
    rho: Fraction
    units_bound: int
    derivation: str


def central_measurements(
    resolved: ResolvedSpec, allocation: Allocation
) -> list[CentralMeasurement]:
    """The central allocation's measurements, in its order, each level after the other (as
    `noisy_totals` draws them), as the consortium reads them; U is read from the row plan (a
    sum's `Units` range; a count of rows adds 1)."""
    sums = {u.name: u for u in allocation.row_plan(resolved, None).sums}
    sizes = (resolved.cells,) if resolved.levels is None else resolved.levels.sizes
    labels = (None, *(",".join(c) or "total" for c in resolved.margin_columns))
    made = []
    for m in allocation.measurements:
        units = sums.get(m.name)
        bound = 1 if units is None else max(abs(units.lower_units), abs(units.upper_units))
        for level, (noise, size, label) in enumerate(zip(m.levels, sizes, labels, strict=True)):
            assert noise.sensitivity_squared_units is not None  # Gaussian noise
            made.append(
                CentralMeasurement(
                    m.name,
                    level,
                    label,
                    size,
                    noise.sensitivity_units,
                    noise.sensitivity_squared_units,
                    noise.loss.rho,
                    bound,
                    noise.derivation,
                )
            )
    return made


@dataclass(frozen=True)
class PooledLaw:
    """The noise of one level of one measurement in the decrypted total: the sum of `parties`
    iid N_Z(0, share_sigma2) shares, with sensitivities multiplied by max_sites_per_unit."""

    share_sigma2: Fraction
    parties: int
    delta1_units: int
    delta2_squared_units: int
    derivation: str


_Level = TypeVar("_Level", bound=LevelNoise)


def _pooled_level(level: _Level, law: PooledLaw) -> _Level:
    """`level` (a measurement's cells, or one of its margins, whose row recipe it keeps) with
    the pooled law: its margin of error and variance are then the exact law of the sum of the
    shares (`LevelNoise.parties`), not one discrete Gaussian's."""
    return replace(
        level,
        sensitivity_units=law.delta1_units,
        sensitivity_squared_units=law.delta2_squared_units,
        derivation=law.derivation,
        sigma2_units=law.share_sigma2,
        parties=law.parties,
    )


def _pooled(m: Measurement, laws: Sequence[PooledLaw]) -> Measurement:
    margins = tuple(
        _pooled_level(level, law) for level, law in zip(m.margins, laws[1:], strict=True)
    )
    return replace(_pooled_level(m, laws[0]), margins=margins)


def _with_measurements(allocated: Allocated, made: Mapping[str, Measurement]) -> Allocated:
    """`allocated` reading the pooled measurements: every field that holds a measurement (a
    count's or sum's own, a mean's or share's numerator and count) is replaced by name."""
    swapped: dict[str, Any] = {
        f.name: made[value.name]
        for f in fields(allocated)
        if isinstance(value := getattr(allocated, f.name), Measurement)
    }
    return replace(allocated, **swapped)


def pooled_allocation(
    allocation: Allocation, laws: Mapping[str, Sequence[PooledLaw]]
) -> Allocation:
    """The central allocation with each measurement's noise, at every level, replaced by its
    pooled law (`laws`: per measurement, the cells' then each margin's): Δ as the consortium
    bounds it, the sum of `parties` shares of σ²."""
    made = {m.name: _pooled(m, laws[m.name]) for m in allocation.measurements}
    statistics = [_with_measurements(a, made) for a in allocation.statistics]
    return replace(allocation, statistics=statistics, measurements=list(made.values()))


def pooled_margins(resolved: ResolvedSpec, allocation: Allocation) -> MarginAccuracy | None:
    """With margins, the public facts of the consistent table (every level's pooled law and the
    exact margins of error of the estimate), as a central release states them; else None."""
    return margin_accuracy(resolved, allocation)


def noisy_table(
    resolved: ResolvedSpec,
    allocation: Allocation,
    margins: MarginAccuracy | None,
    totals: Mapping[str, Sequence[list[int]]],
) -> tuple[pl.DataFrame, Outcome | None]:
    """The released table from the decrypted noisy totals (integer units per measurement, one
    list per level), by the central release's post-processing (`released_table`): clamping,
    scaling, means, rounding, and with margins the consistent table and its controlled rounding
    (and what that did). No statistic of a consortium release has a selection (`unsupported`)."""
    noisy = {
        m.name: tuple(pl.Series(level, dtype=pl.Int128) for level in totals[m.name])
        for m in allocation.measurements
    }
    return released_table(resolved, allocation, margins, noisy, {})


#: A statistic's noise in a consortium release (each statistic's `mechanism` in the manifest),
#: where a central release states one discrete Gaussian draw of σ² = Δ2²/(2ρ).
DISTRIBUTED_TEXT = (
    "distributed discrete Gaussian: the sum of {parties} sites' exact discrete Gaussian shares "
    "N_Z(0, σ_s²), each drawn at its site (Canonne, Kamath & Steinke 2020, Algorithm 3; integer "
    "arithmetic, the site's OS CSPRNG bits) and added to its exact aggregates under BFV "
    "encryption; the released noise is that sum, of variance {parties}·σ_s² "
    "(noise_variance_units_exact), with the sum's exact law. σ_s² (share_sigma2_units_exact in "
    "<release folder>.consortium.json) is the smallest for which any {honest} of the shares "
    "(m − t: those a coalition of the key holder with t sites cannot subtract) are ρ-zCDP "
    "together (Kairouz, Liu & Steinke 2021)"
)


def manifest_for(
    resolved: ResolvedSpec,
    allocation: Allocation,
    margins: MarginAccuracy | None,
    outcome: Outcome | None,
    change: ProtectedChange,
    period: Period | None,
    delta: float | None,
    engine: str,
    bits: str,
    seeded: bool,
    honest: int,
) -> Manifest:
    """The central release's manifest of the pooled allocation (with margins, every level's law
    and margins of error, updated by what the rounding did), each statistic's `mechanism` the
    sum of the sites' shares (`DISTRIBUTED_TEXT`: `honest` = m − t of them meet ρ); `bits`
    names the sites' noise sources (private only if none was seeded)."""
    manifest = build_manifest(
        resolved,
        allocation,
        change,
        None if period is None else str(period),
        engine,
        margins,
        NoiseSourceEntry(bits=bits, seeded=seeded, private=not seeded),
        delta,
    )
    if margins is not None and outcome is not None:
        manifest = with_outcome(manifest, allocation, resolved.spec.postprocess, margins, outcome)
    central = noise_family(Mechanism.GAUSSIAN).text(Measure.ZCDP)
    parties = max((m.parties for m in allocation.measurements), default=1)
    summed = DISTRIBUTED_TEXT.format(parties=parties, honest=honest)
    statistics = [
        entry.model_copy(update={"mechanism": summed}) if entry.mechanism == central else entry
        for entry in manifest.statistics
    ]
    manifest = manifest.model_copy(update={"statistics": statistics})
    if manifest.margins is not None:
        stated = manifest.margins.margin_of_error
        summed = stated.replace(
            "every level's discrete Gaussian draws",
            "every level's noise, each the sum of the contributing sites' exact discrete Gaussian "
            "shares (its exact law)",
        )
        manifest = manifest.model_copy(
            update={"margins": manifest.margins.model_copy(update={"margin_of_error": summed})}
        )
    return manifest
