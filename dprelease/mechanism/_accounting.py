"""Accounting: from a resolved spec and a release's loss to measurements — sensitivity, budget
share, granularity and noise scale of every noisy vector.

Everything here is computed from declared, public settings, never from data, so the allocation
and the manifest built from it can be published as they are.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from dprelease.change import ProtectedChange
from dprelease.errors import NoiseError, SpecError
from dprelease.loss import PrivacyLoss, split_by_weights
from dprelease.mechanism._quantile_accounting import QuantileAllocation, allocate_quantile
from dprelease.mechanism.noise import exact_scale, laplace_moe95, laplace_variance
from dprelease.spec import (
    CountStatistic,
    MeanStatistic,
    QuantileStatistic,
    ReleaseSpec,
    ResolvedSpec,
    Statistic,
    StatisticKind,
    SumStatistic,
)

#: Automatic granularity sits this many binary orders of magnitude below the noise scale, so the
#: rounding to integer units is negligible against the noise it is hidden in.
GRANULARITY_HEADROOM_BITS = 20
#: P(|Laplace| > t) = exp(-t/b): the 95% half-width of Laplace(b) is b·ln(20).
LN_20 = math.log(20)
#: Largest sensitivity in integer units. One row moves a sum by at most Δ units, so with fewer
#: than 2^63 rows an Int128 accumulator cannot overflow whatever the data (2^53 · 2^63 < 2^127).
MAX_SENSITIVITY_UNITS = 2**53


@dataclass(frozen=True, kw_only=True)
class _Noise:
    """One noisy integer vector's law: Δ and the exact discrete Laplace scale, in integer units
    of `granularity`, and the loss it spends."""

    granularity: Fraction  # 1 for counts
    sensitivity_units: int
    derivation: str
    loss: PrivacyLoss
    scale_units: Fraction  # exact discrete Laplace scale, ≥ sensitivity_units / ε

    @property
    def epsilon(self) -> Fraction:
        return self.loss.epsilon

    @property
    def sensitivity(self) -> float:
        return float(self.sensitivity_units * self.granularity)

    @property
    def scale(self) -> float:
        return float(self.scale_units * self.granularity)

    @property
    def moe95(self) -> float:
        """95% margin of error: the half-width h·g of the exact discrete Laplace interval."""
        return float(laplace_moe95(self.scale_units) * self.granularity)

    @property
    def variance(self) -> float:
        return laplace_variance(self.scale_units) * float(self.granularity) ** 2


@dataclass(frozen=True, kw_only=True)
class MarginMeasurement(_Noise):
    """A margin of a measurement (see `Measurement.margins`): its rows are sums of cells, noised
    with the measurement's granularity but their own share of ε, Δ and scale."""

    columns: tuple[str, ...]  # the margin's key columns, in the grid's order; () = total


@dataclass(frozen=True, kw_only=True)
class Measurement(_Noise):
    """One noisy integer vector over the key grid: a count or a sum in units of `granularity`.

    With margins (`spec.margins`) its fields are the cells' (the finest level's) and each
    margin is measured too, from its own share of the measurement's ε (`margins`)."""

    name: str
    kind: StatisticKind  # COUNT or SUM only
    column: str | None = None
    lower: float | None = None
    upper: float | None = None
    lower_units: int = 0
    upper_units: int = 1
    margins: tuple[MarginMeasurement, ...] = ()

    @property
    def levels(self) -> tuple[_Noise, ...]:
        """The noise of every level: the cells, then each margin in the spec's order."""
        return (self, *self.margins)

    @property
    def loss_spent(self) -> PrivacyLoss:
        """The loss of every level together (what the measurement spends)."""
        total = self.levels[0].loss
        for level in self.levels[1:]:
            total += level.loss
        return total


@dataclass(frozen=True)
class StatisticAllocation:
    """How a released column is made: a count or sum is one measurement; a mean is sum / count,
    each its own measurement or another statistic's (`loss` is what it spends itself)."""

    statistic: Statistic
    loss: PrivacyLoss
    measurement: Measurement  # the count, or the sum for `sum` and `mean`
    count: Measurement | None = None  # the denominator of a mean

    reused: tuple[str, ...] = ()  # names of the statistics whose measurements a mean reuses

    def own(self) -> list[Measurement]:
        """The measurements this statistic pays for from its own share."""
        parts = [self.measurement] if self.count is None else [self.measurement, self.count]
        return [m for m in parts if m.name not in self.reused]

    @property
    def epsilon(self) -> Fraction:
        return self.loss.epsilon


@dataclass(frozen=True)
class Allocation:
    """A release's loss allocated: per statistic its share and measurements (a quantile: its
    plan), each measurement's sensitivity, granularity and noise scale (at every level), and
    how the total was split."""

    statistics: list[StatisticAllocation | QuantileAllocation]
    measurements: list[Measurement]
    total: PrivacyLoss
    split: Literal["weights", "accuracy targets"]

    @property
    def quantiles(self) -> list[QuantileAllocation]:
        """The quantile statistics: each needs its column's histogram per cell."""
        return [a for a in self.statistics if isinstance(a, QuantileAllocation)]


def _l1_reach(spec: ReleaseSpec, neighbours: ProtectedChange, grouped: bool) -> tuple[int, str]:
    """Rows one unit can move in L1 over a level's rows, and why. Substitution = one removal
    plus one addition; on a grouped level the added rows may sit in other groups (×2), on an
    ungrouped one (the whole release, or a grand total) they replace rows of the same cell.

    R is exactly what the engine enforces last (`max_rows_per_unit`, which the spec keeps at or
    below max_groups_per_unit × max_rows_per_group), so nothing else is assumed.
    """
    rows = spec.rows_per_unit
    if spec.privacy_unit is None:
        reason = "each row is a privacy unit: one unit is 1 row"
    elif spec.max_rows_per_unit is None:
        reason = (
            f"one unit keeps at most {rows} row(s) (max_rows_per_unit defaults to "
            f"{spec.max_groups_per_unit} group(s) × {spec.max_rows_per_group} row(s) per group)"
        )
    else:
        reason = f"one unit keeps at most {rows} row(s) (max_rows_per_unit)"
    if neighbours is ProtectedChange.SUBSTITUTE and grouped:
        return (
            2 * rows,
            reason + "; substitution removes those rows and adds as many (possibly "
            "in other groups): ×2",
        )
    return rows, reason


def rows_reach(spec: ReleaseSpec, neighbours: ProtectedChange) -> int:
    """Rows one privacy unit can move in L1 over the cells (see `_l1_reach`)."""
    return _l1_reach(spec, neighbours, bool(spec.group_by))[0]


def _count_sensitivity(
    spec: ReleaseSpec, neighbours: ProtectedChange, grouped: bool
) -> tuple[int, str]:
    reach, reason = _l1_reach(spec, neighbours, grouped)
    return reach, f"count: {reason} → Δ = {reach}"


def _sum_sensitivity(
    spec: ReleaseSpec,
    neighbours: ProtectedChange,
    lower_u: int,
    upper_u: int,
    granularity: Fraction,
    grouped: bool,
) -> tuple[int, str]:
    g = f"{float(granularity):g}"
    if neighbours is ProtectedChange.SUBSTITUTE and not grouped:
        rows = spec.rows_per_unit
        span = max(upper_u, 0) - min(lower_u, 0)
        delta = rows * span
        return delta, (
            f"sum: one unit's ≤ {rows} row(s) replaced, each in [{lower_u}, {upper_u}] "
            f"units of {g} → Δ = {rows} × {span} = {delta} units"
        )
    reach, reason = _l1_reach(spec, neighbours, grouped)
    largest = max(abs(lower_u), abs(upper_u))
    delta = reach * largest
    return delta, (
        f"sum: {reason}; each clamped to [{lower_u}, {upper_u}] units of {g} → "
        f"Δ = {reach} × {largest} = {delta} units"
    )


def auto_granularity(sensitivity: Fraction, epsilon: Fraction) -> Fraction:
    """A power of two 2^20 below the noise scale Δ/ε, so discretizing costs nothing visible.

    Computed exactly from the declared Δ and ε (never from the data), so no bound or ε can make
    it overflow.
    """
    scale = sensitivity / epsilon
    exponent = scale.numerator.bit_length() - scale.denominator.bit_length()
    if Fraction(2) ** exponent > scale:  # now 2^exponent ≤ scale < 2^(exponent + 1)
        exponent -= 1
    return Fraction(2) ** (exponent - GRANULARITY_HEADROOM_BITS)


def _noise_scale(delta: int, epsilon: Fraction, path: str) -> Fraction:
    """The exact sampling scale for Δ/ε, refused here (before any budget is reserved) when
    the sampler cannot draw it."""
    if delta > MAX_SENSITIVITY_UNITS:
        raise SpecError(
            path,
            f"sensitivity of {delta} units is above 2^53; lower the bounds or "
            "max_rows_per_unit, or choose a coarser 'granularity'",
        )
    try:
        return exact_scale(Fraction(delta) / epsilon)
    except NoiseError:
        raise SpecError(
            path,
            "the noise scale Δ/ε is beyond what the noise sampler can draw; raise ε, or lower "
            "the bounds or max_rows_per_unit (or choose a coarser 'granularity')",
        ) from None


def _checked(m: Measurement, path: str) -> Measurement:
    """Every number the manifest states about `m` (each level) must be a finite float."""
    stated: tuple[float, ...]
    try:
        stated = tuple(
            x
            for level in m.levels
            for x in (level.sensitivity, level.scale, level.moe95, level.variance)
        ) + (float(m.loss_spent.amount),)
    except OverflowError:
        stated = (math.inf,)
    if not all(math.isfinite(x) for x in stated):
        raise SpecError(
            path,
            "the noise scale or variance of this statistic is too large to state as a number; "
            "raise ε or narrow the bounds",
        )
    return m


def _levels(resolved: ResolvedSpec, epsilon: Fraction) -> list[tuple[bool, Fraction]]:
    """Per level (the cells, then each margin): whether it is grouped, and its share of a
    measurement's `epsilon` (`ResolvedSpec.level_shares`: exact, the shares sum to `epsilon`;
    levels compose sequentially)."""
    shares = [epsilon * fraction for fraction in resolved.level_shares]
    return list(zip(resolved.level_grouped, shares, strict=True))


def _measured(
    resolved: ResolvedSpec,
    epsilon: Fraction,
    path: str,
    granularity: Fraction,
    sensitivity: Callable[[bool], tuple[int, str]],
) -> tuple[dict[str, Any], tuple[MarginMeasurement, ...]]:
    """The cells' noise (keyword arguments of `Measurement`) and each margin's, from the level
    shares of `epsilon` and each level's Δ (`sensitivity(grouped)`)."""
    noise: list[dict[str, Any]] = []
    for grouped, share in _levels(resolved, epsilon):
        delta, derivation = sensitivity(grouped)
        noise.append(
            {
                "granularity": granularity,
                "sensitivity_units": delta,
                "derivation": derivation,
                "loss": PrivacyLoss.pure(share),
                "scale_units": _noise_scale(delta, share, path),
            }
        )
    margins = tuple(
        MarginMeasurement(columns=columns, **level)
        for columns, level in zip(resolved.margin_columns, noise[1:], strict=True)
    )
    return noise[0], margins


def _count(
    name: str, epsilon: Fraction, resolved: ResolvedSpec, neighbours: ProtectedChange, path: str
) -> Measurement:
    spec = resolved.spec
    cells, margins = _measured(
        resolved,
        epsilon,
        path,
        Fraction(1),
        lambda grouped: _count_sensitivity(spec, neighbours, grouped),
    )
    m = Measurement(name=name, kind=StatisticKind.COUNT, margins=margins, **cells)
    return _checked(m, path)


def granularity_references(
    stat: SumStatistic | MeanStatistic,
    resolved: ResolvedSpec,
    neighbours: ProtectedChange,
    epsilon: Fraction,
) -> list[Fraction]:
    """Per level, the noise scale (declared bounds, before discretization) from which an
    automatic granularity is derived: it is the finest of the levels' powers of two, so every
    level's noise stays 2^20 above it."""
    largest = max(abs(Fraction(stat.lower)), abs(Fraction(stat.upper)))
    return [
        _l1_reach(resolved.spec, neighbours, grouped)[0] * largest / share
        for grouped, share in _levels(resolved, epsilon)
    ]


def _sum(
    name: str,
    stat: SumStatistic | MeanStatistic,
    epsilon: Fraction,
    resolved: ResolvedSpec,
    neighbours: ProtectedChange,
    path: str,
) -> Measurement:
    """A sum in integer units of the declared granularity, else an automatic power of two."""
    spec = resolved.spec
    lower, upper = Fraction(stat.lower), Fraction(stat.upper)
    if stat.granularity is not None:
        granularity = Fraction(stat.granularity)
    else:
        granularity = min(
            auto_granularity(scale, Fraction(1))
            for scale in granularity_references(stat, resolved, neighbours, epsilon)
        )
    lower_u = round(lower / granularity)
    upper_u = round(upper / granularity)
    if lower_u == upper_u:
        raise SpecError(
            f"{path}.granularity",
            "granularity is coarser than the bounds' range; choose a smaller one",
        )
    cells, margins = _measured(
        resolved,
        epsilon,
        path,
        granularity,
        lambda grouped: _sum_sensitivity(spec, neighbours, lower_u, upper_u, granularity, grouped),
    )
    m = Measurement(
        name=name,
        kind=StatisticKind.SUM,
        column=stat.column,
        lower=stat.lower,
        upper=stat.upper,
        lower_units=lower_u,
        upper_units=upper_u,
        margins=margins,
        **cells,
    )
    return _checked(m, path)


def sensitivity_bound(
    stat: CountStatistic | SumStatistic, spec: ReleaseSpec, neighbours: ProtectedChange
) -> Fraction:
    """Δ of a count or sum in its own units, before discretization (granularity → 0)."""
    reach = rows_reach(spec, neighbours)
    if isinstance(stat, CountStatistic):
        return Fraction(reach)
    return reach * max(abs(Fraction(stat.lower)), abs(Fraction(stat.upper)))


def _need(
    stat: CountStatistic | SumStatistic, spec: ReleaseSpec, neighbours: ProtectedChange
) -> Fraction:
    """ε a statistic needs for its target margin, Δ·ln(20)/target (the continuous Laplace
    quantile, in exact rationals): the accuracy-first split is in proportion to these."""
    assert stat.target_moe95 is not None  # the spec has targets on every count and sum or none
    return sensitivity_bound(stat, spec, neighbours) * Fraction(LN_20) / Fraction(stat.target_moe95)


def _path(index: int) -> str:
    return f"release.statistics[{index}]"


def internal_name(stat: Statistic, part: str) -> str:
    """Name of a measurement a mean makes for itself; ':' keeps it apart from every name a spec
    can give (see `spec.NAME_PATTERN`)."""
    return f"{stat.kind.value}:{stat.name}:{part}"


def spending_statistics(spec: ReleaseSpec) -> list[Statistic]:
    """The statistics that get a share of ε: all but means that reuse both their parts."""
    return [
        s for s in spec.statistics if not isinstance(s, MeanStatistic) or spec.reuse_of(s).spends
    ]


def allocate(resolved: ResolvedSpec, loss: PrivacyLoss, neighbours: ProtectedChange) -> Allocation:
    """Split a release's loss over its statistics and derive every measurement's sensitivity and
    noise scale.

    Everything comes from the spec and the loss alone (granularity too: declared, else
    automatic), so the allocation and every refusal are the same whatever the data. Raises
    SpecError, naming the statistic, for anything the sampler or the manifest could not handle.

    A mean divides the release's first count by its first sum of the same column and bounds
    (post-processing, no extra loss; see `ReleaseSpec.reuse_of`); what it cannot reuse it
    measures from its own share (half each when it needs both). With margins every
    measurement's share is split again over its levels (`Measurement.margins`).
    """
    spec = resolved.spec
    epsilon = loss.epsilon
    if epsilon <= 0:
        raise SpecError("epsilon", "ε must be > 0")
    spending = spending_statistics(spec)
    accuracy_first = any(
        isinstance(s, CountStatistic | SumStatistic) and s.target_moe95 is not None
        for s in spending
    )
    weights = (
        [
            _need(s, spec, neighbours)
            for s in spending
            if isinstance(s, CountStatistic | SumStatistic)
        ]
        if accuracy_first  # the spec refuses a mean that spends under accuracy targets
        else [Fraction(s.weight or 1) for s in spending]
    )
    share_of = dict(
        zip([s.name for s in spending], split_by_weights(epsilon, weights), strict=True)
    )
    made: dict[str, Measurement] = {}
    for index, stat in enumerate(spec.statistics):
        if isinstance(stat, CountStatistic):
            made[stat.name] = _count(
                stat.name, share_of[stat.name], resolved, neighbours, _path(index)
            )
        elif isinstance(stat, SumStatistic):
            made[stat.name] = _sum(
                stat.name, stat, share_of[stat.name], resolved, neighbours, _path(index)
            )
    allocated: list[StatisticAllocation | QuantileAllocation] = []
    for index, stat in enumerate(spec.statistics):
        if isinstance(stat, QuantileStatistic):
            share = share_of[stat.name]
            allocated.append(allocate_quantile(stat, share, spec, neighbours, _path(index)))
            continue
        if not isinstance(stat, MeanStatistic):
            allocated.append(
                StatisticAllocation(stat, PrivacyLoss.pure(share_of[stat.name]), made[stat.name])
            )
            continue
        path, reuse = _path(index), spec.reuse_of(stat)
        share = share_of.get(stat.name, Fraction(0))
        part = share / ((reuse.sum is None) + (reuse.count is None) or 1)  # its share, split
        total = (
            made[reuse.sum]
            if reuse.sum
            else _sum(internal_name(stat, "sum"), stat, part, resolved, neighbours, path)
        )
        count = (
            made[reuse.count]
            if reuse.count
            else _count(internal_name(stat, "count"), part, resolved, neighbours, path)
        )
        reused = tuple(name for name in (reuse.sum, reuse.count) if name is not None)
        allocated.append(StatisticAllocation(stat, PrivacyLoss.pure(share), total, count, reused))
    measurements = {
        m.name: m
        for a in allocated
        if isinstance(a, StatisticAllocation)
        for m in (a.measurement, a.count)
        if m is not None
    }
    return Allocation(
        allocated,
        list(measurements.values()),
        loss,
        "accuracy targets" if accuracy_first else "weights",
    )
