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
from dprelease.errors import SpecError
from dprelease.loss import Measure, Mechanism, PrivacyLoss
from dprelease.mechanism._l1 import count_sensitivity, l1_reach, sum_sensitivity
from dprelease.mechanism._l2 import level_l2
from dprelease.mechanism._quantile_accounting import QuantileAllocation, allocate_quantile
from dprelease.mechanism._targets import need
from dprelease.mechanism._values import RowValue, row_value
from dprelease.mechanism.noise import LevelNoise, level_noise, noise_family
from dprelease.spec import (
    CountStatistic,
    MeanStatistic,
    QuantileStatistic,
    ReleaseSpec,
    ResolvedSpec,
    Statistic,
    StatisticKind,
    SumStatistic,
    SurveyWeight,
)

#: Automatic granularity sits this many binary orders of magnitude below the noise scale, so the
#: rounding to integer units is negligible against the noise it is hidden in.
GRANULARITY_HEADROOM_BITS = 20


@dataclass(frozen=True, kw_only=True)
class MarginMeasurement(LevelNoise):
    """A margin of a measurement (see `Measurement.margins`): its rows are sums of cells, noised
    with the measurement's granularity but their own share of ε, Δ and scale."""

    columns: tuple[str, ...]  # the margin's key columns, in the grid's order; () = total


@dataclass(frozen=True, kw_only=True)
class Measurement(LevelNoise):
    """One noisy integer vector over the key grid: a count or a sum in units of `granularity`.

    An unweighted count counts rows (`counts_rows`); every other measurement sums each kept
    row's value in integer units, clamped to [lower_units, upper_units] (`_values`: a weighted
    count sums the weights, a weighted sum the products weight × value), which are also the
    bounds its L2 sensitivity rests on. With margins (`spec.margins`) its fields are the cells'
    (the finest level's) and each margin is measured too, from its own share of the
    measurement's ε (`margins`)."""

    name: str
    kind: StatisticKind  # COUNT or SUM only
    column: str | None = None
    lower: float | None = None
    upper: float | None = None
    survey_weight: SurveyWeight | None = None
    lower_units: int = 0
    upper_units: int = 1
    margins: tuple[MarginMeasurement, ...] = ()

    @property
    def counts_rows(self) -> bool:
        """Whether this counts rows (an unweighted count): integers, released as integers."""
        return self.kind is StatisticKind.COUNT and self.survey_weight is None

    @property
    def nonnegative_values(self) -> bool:
        """Whether no row can add a negative value (counts, weighted or not, and sums whose
        lower bound is ≥ 0), so the truth is ≥ 0 too."""
        return self.kind is StatisticKind.COUNT or (self.lower is not None and self.lower >= 0)

    @property
    def levels(self) -> tuple[LevelNoise, ...]:
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
    mechanism: Mechanism = Mechanism.LAPLACE

    @property
    def quantiles(self) -> list[QuantileAllocation]:
        """The quantile statistics: each needs its column's histogram per cell."""
        return [a for a in self.statistics if isinstance(a, QuantileAllocation)]


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


def _levels(resolved: ResolvedSpec, loss: PrivacyLoss) -> list[tuple[bool, PrivacyLoss]]:
    """Per level (the cells, then each margin): whether it is grouped, and its share of a
    measurement's `loss` (`ResolvedSpec.level_shares`: exact, the shares sum to the loss;
    levels compose sequentially, in ε or in ρ alike)."""
    shares = [loss * fraction for fraction in resolved.level_shares]
    return list(zip(resolved.level_grouped, shares, strict=True))


def granularity_references(
    stat: CountStatistic | SumStatistic | MeanStatistic,
    resolved: ResolvedSpec,
    neighbours: ProtectedChange,
    loss: PrivacyLoss,
    part: StatisticKind | None = None,
) -> list[Fraction]:
    """Per level, the noise scale (declared bounds, before discretization) from which an
    automatic granularity is derived for a statistic's measurement (a mean's `part`): the
    finest of the levels' powers of two, so every level's noise stays 2^20 above it. Under
    zCDP the scale is the Laplace one at the ε whose ε²/2 is the level's ρ, which is at least σ
    (Δ2 ≤ Δ1): the noise stays as far above."""
    value = row_value(stat, resolved.spec, part)
    assert value is not None  # a count of rows has no granularity
    return [
        l1_reach(resolved.spec, neighbours, grouped)[0] * value.largest / _epsilon_like(share)
        for grouped, share in _levels(resolved, loss)
    ]


def _epsilon_like(loss: PrivacyLoss) -> Fraction:
    """ε itself, or for a ρ the ε with ε²/2 = ρ (to a float's precision: it only places the
    automatic granularity)."""
    if loss.measure is Measure.PURE:
        return loss.amount
    return Fraction(math.sqrt(2 * loss.amount))


@dataclass(frozen=True)
class _Measuring:
    """What every measurement of one allocation is made with: the resolved spec, the protected
    change and the mechanism. Each measurement adds only what is its own (name, row value, share
    of the loss, path for errors)."""

    resolved: ResolvedSpec
    neighbours: ProtectedChange
    mechanism: Mechanism

    def measure(
        self,
        name: str,
        stat: CountStatistic | SumStatistic | MeanStatistic,
        part: StatisticKind,
        loss: PrivacyLoss,
        path: str,
    ) -> Measurement:
        """A statistic's count or sum (a mean's `part`): a count of rows, or a sum of each row's
        value (a weighted count: of its weight; see `_values`) in integer units of the declared
        granularity, else an automatic power of two."""
        value = row_value(stat, self.resolved.spec, part)
        if value is None:
            return self._count(name, loss, path)
        if value.granularity is not None:
            granularity = Fraction(value.granularity)
        else:
            references = granularity_references(stat, self.resolved, self.neighbours, loss, part)
            granularity = min(auto_granularity(scale, Fraction(1)) for scale in references)
        return self._sum(name, part, value, granularity, loss, path)

    def _count(self, name: str, loss: PrivacyLoss, path: str) -> Measurement:
        spec, neighbours = self.resolved.spec, self.neighbours
        cells, margins = self._levels_noise(
            loss,
            path,
            Fraction(1),
            lambda grouped: count_sensitivity(spec, neighbours, grouped),
        )
        m = Measurement(name=name, kind=StatisticKind.COUNT, margins=margins, **cells)
        return _checked(m, path)

    def _sum(
        self,
        name: str,
        kind: StatisticKind,
        value: RowValue,
        granularity: Fraction,
        loss: PrivacyLoss,
        path: str,
    ) -> Measurement:
        """A sum of `value` in integer units of `granularity`; its Δ1 and Δ2 rest on the range
        of one row's value in those units (the weighted range when weighted)."""
        spec, neighbours = self.resolved.spec, self.neighbours
        low, high = value.range
        lower_u, upper_u = round(low / granularity), round(high / granularity)
        if lower_u == upper_u:
            raise SpecError(
                f"{path}.granularity",
                "granularity is coarser than the bounds' range; choose a smaller one",
            )
        cells, margins = self._levels_noise(
            loss,
            path,
            granularity,
            lambda grouped: sum_sensitivity(
                spec, neighbours, lower_u, upper_u, granularity, grouped, value
            ),
            (lower_u, upper_u),
        )
        m = Measurement(
            name=name,
            kind=kind,
            column=value.column,
            lower=value.lower,
            upper=value.upper,
            survey_weight=value.weight,
            lower_units=lower_u,
            upper_units=upper_u,
            margins=margins,
            **cells,
        )
        return _checked(m, path)

    def _levels_noise(
        self,
        loss: PrivacyLoss,
        path: str,
        granularity: Fraction,
        sensitivity: Callable[[bool], tuple[int, str]],
        bounds: tuple[int, int] = (1, 1),
    ) -> tuple[dict[str, Any], tuple[MarginMeasurement, ...]]:
        """The cells' noise (keyword arguments of `Measurement`) and each margin's, from the
        level shares of `loss`, each level's Δ1 (`sensitivity(grouped)`) and, for Gaussian
        noise, its Δ2 (from the values' integer `bounds`, (1, 1) for counts)."""
        noise: list[dict[str, Any]] = []
        for level, (grouped, share) in enumerate(_levels(self.resolved, loss)):

            def l2(level: int = level, grouped: bool = grouped) -> tuple[int, str]:
                return level_l2(self.resolved, self.neighbours, level, grouped, *bounds)

            made = level_noise(self.mechanism, share, granularity, sensitivity(grouped), l2, path)
            noise.append({name: getattr(made, name) for name in _LEVEL_FIELDS})
        margins = tuple(
            MarginMeasurement(columns=columns, **level)
            for columns, level in zip(self.resolved.margin_columns, noise[1:], strict=True)
        )
        return noise[0], margins


_LEVEL_FIELDS = tuple(LevelNoise.__dataclass_fields__)


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


def allocate(
    resolved: ResolvedSpec,
    loss: PrivacyLoss,
    neighbours: ProtectedChange,
    mechanism: Mechanism = Mechanism.LAPLACE,
) -> Allocation:
    """Split a release's loss over its statistics and derive every measurement's sensitivity and
    noise.

    Everything comes from the spec, the loss and the mechanism alone (granularity too:
    declared, else automatic), so the allocation and every refusal are the same whatever the
    data. Raises SpecError, naming the statistic, for anything the sampler or the manifest could
    not handle. The loss is split in its own measure (ε, or ρ), each share spent by `mechanism`:
    Laplace noise at ε (in a zCDP scope at the largest ε with ε²/2 ≤ its ρ), Gaussian noise at
    ρ (zCDP only).

    A mean divides the release's first count by its first sum of the same column and bounds,
    weighted as it is (post-processing, no extra loss; see `ReleaseSpec.reuse_of`); what it
    cannot reuse it measures from its own share (half each when it needs both). With margins every
    measurement's share is split again over its levels (`Measurement.margins`).
    """
    spec = resolved.spec
    if loss.amount <= 0:
        raise SpecError("epsilon", f"{loss.measure.symbol} must be > 0")
    family = noise_family(mechanism)
    if loss.measure not in family.spends:
        raise SpecError("release.mechanism", family.refusal)
    spending = spending_statistics(spec)
    accuracy_first = any(
        isinstance(s, CountStatistic | SumStatistic) and s.target_moe95 is not None
        for s in spending
    )
    weights = (
        [
            need(s, resolved, neighbours, loss.measure, mechanism)
            for s in spending
            if isinstance(s, CountStatistic | SumStatistic)
        ]
        if accuracy_first  # the spec refuses a mean that spends under accuracy targets
        else [Fraction(s.weight or 1) for s in spending]
    )
    share_of = dict(zip([s.name for s in spending], loss.split(weights), strict=True))
    measuring = _Measuring(resolved, neighbours, mechanism)
    made: dict[str, Measurement] = {}
    for index, stat in enumerate(spec.statistics):
        if isinstance(stat, CountStatistic | SumStatistic):
            share, path = share_of[stat.name], _path(index)
            made[stat.name] = measuring.measure(stat.name, stat, stat.kind, share, path)
    allocated: list[StatisticAllocation | QuantileAllocation] = []
    for index, stat in enumerate(spec.statistics):
        if isinstance(stat, QuantileStatistic):
            share = share_of[stat.name]
            allocated.append(allocate_quantile(stat, share, spec, neighbours, _path(index)))
            continue
        if not isinstance(stat, MeanStatistic):
            allocated.append(StatisticAllocation(stat, share_of[stat.name], made[stat.name]))
            continue
        path, reuse = _path(index), spec.reuse_of(stat)
        share = share_of.get(stat.name, PrivacyLoss(loss.measure, Fraction(0)))
        part = share * Fraction(1, (reuse.sum is None) + (reuse.count is None) or 1)
        total, count = (
            made[name]
            if name
            else measuring.measure(internal_name(stat, kind.value), stat, kind, part, path)
            for name, kind in ((reuse.sum, StatisticKind.SUM), (reuse.count, StatisticKind.COUNT))
        )
        reused = tuple(name for name in (reuse.sum, reuse.count) if name is not None)
        allocated.append(StatisticAllocation(stat, share, total, count, reused))
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
        mechanism,
    )
