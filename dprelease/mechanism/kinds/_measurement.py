"""Measurements: the noisy integer vectors counts, sums, means (and shares) are made of.

A measurement is one noisy integer vector over the key grid, a count of rows or a sum of what
each kept row adds (`spec.RowValue`) in integer units of its granularity, with its sensitivity
from the protected change (`mechanism.sensitivity`) and the noise its share of the loss buys
(`mechanism.noise`), at every level of a release with margins. Everything here is computed from
declared, public settings, never from data, so it can be published as it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dprelease.change import ProtectedChange
from dprelease.errors import SpecError
from dprelease.loss import Measure, Mechanism, PrivacyLoss
from dprelease.mechanism.engines import InCategories, Number, Units
from dprelease.mechanism.noise import LevelNoise, Sensitivity, level_noise
from dprelease.mechanism.sensitivity import count_sensitivity, l1_reach, level_l2, sum_sensitivity
from dprelease.spec import ResolvedSpec, RowValue, StatisticKind, SurveyWeight

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
    row's value in integer units, clamped to [lower_units, upper_units] (`spec.RowValue`: a
    weighted count sums the weights, a weighted sum the products weight × value), which are also
    the bounds its L2 sensitivity rests on. With margins (`spec.margins`) its fields are the
    cells' (the finest level's) and each margin is measured too, from its own share of the
    measurement's ε (`margins`)."""

    name: str
    kind: StatisticKind  # COUNT or SUM only
    column: str | None = None
    lower: float | None = None
    upper: float | None = None
    survey_weight: SurveyWeight | None = None
    lower_units: int = 0
    upper_units: int = 1
    drop: bool = False  # `missing: drop`: a row without a number in `column` adds 0
    margins: tuple[MarginMeasurement, ...] = ()

    @property
    def counts_rows(self) -> bool:
        """Whether this counts rows (an unweighted count): integers, released as integers."""
        return (
            self.kind is StatisticKind.COUNT and self.survey_weight is None and self.column is None
        )

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

    def units(self, reads: list[str]) -> Units | None:
        """What the engine sums per kept row for it (None: it counts rows): its value's factors
        (`value_factors`) and its weight read as a number by the nulls rule and clamped to
        [0, W], their product in integer units of the granularity, clamped to the range in
        units. `reads` are the value columns the row plan reads, in its order."""
        if self.counts_rows:
            return None
        factors = self.value_factors(reads)
        if self.survey_weight is not None:
            weight = reads.index(self.survey_weight.column)
            factors.append(Number.clamped(weight, 0.0, self.survey_weight.upper))
        return Units(
            self.name, tuple(factors), float(self.granularity), self.lower_units, self.upper_units
        )

    def value_factors(self, reads: list[str]) -> list[Number | InCategories]:
        """What a row's value adds before its weight: its column as a number, clamped (none
        for a weighted count, which adds its weight alone)."""
        if self.column is None or self.lower is None or self.upper is None:
            return []
        read = reads.index(self.column)
        return [Number.clamped(read, self.lower, self.upper, drop=self.drop)]

    def read_columns(self) -> list[str]:
        """The input columns its row values read (the value's, then the weight's)."""
        weight = None if self.survey_weight is None else self.survey_weight.column
        return [column for column in (self.column, weight) if column is not None]


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
    value: RowValue, resolved: ResolvedSpec, neighbours: ProtectedChange, loss: PrivacyLoss
) -> list[Fraction]:
    """Per level, the noise scale (declared bounds, before discretization) from which an
    automatic granularity is derived for a measurement of `value`: the finest of the levels'
    powers of two, so every level's noise stays 2^20 above it. Under zCDP the scale is the
    Laplace one at the ε whose ε²/2 is the level's ρ, which is at least σ (Δ2 ≤ Δ1): the noise
    stays as far above."""
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
class Measuring:
    """What every measurement of one allocation is made with: the resolved spec, the protected
    change and the mechanism. Each measurement adds only what is its own (name, row value, share
    of the loss, path for errors)."""

    resolved: ResolvedSpec
    neighbours: ProtectedChange
    mechanism: Mechanism

    def measure(
        self, name: str, value: RowValue | None, kind: StatisticKind, loss: PrivacyLoss, path: str
    ) -> Measurement:
        """A count of rows (`value` None), or a sum of each row's `value` (a weighted count: of
        its weight) in integer units of the declared granularity, else an automatic power of
        two; `kind` is what it is named (COUNT or SUM)."""
        if value is None:
            return self._count(name, loss, path)
        if value.granularity is not None:
            granularity = Fraction(value.granularity)
        else:
            references = granularity_references(value, self.resolved, self.neighbours, loss)
            granularity = min(auto_granularity(scale, Fraction(1)) for scale in references)
        return self._sum(name, kind, value, granularity, loss, path)

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
            drop=value.drop,
            margins=margins,
            **cells,
        )
        return _checked(m, path)

    def _levels_noise(
        self,
        loss: PrivacyLoss,
        path: str,
        granularity: Fraction,
        sensitivity: Any,
        bounds: tuple[int, int] = (1, 1),
    ) -> tuple[dict[str, Any], tuple[MarginMeasurement, ...]]:
        """The cells' noise (keyword arguments of `Measurement`) and each margin's, from the
        level shares of `loss`, each level's Δ1 (`sensitivity(grouped)`) and, for a family
        calibrated to it, its Δ2 (from the values' integer `bounds`, (1, 1) for counts)."""
        noise: list[dict[str, Any]] = []
        for level, (grouped, share) in enumerate(_levels(self.resolved, loss)):
            l2 = self._l2(level, grouped, bounds)
            made = level_noise(self.mechanism, share, granularity, sensitivity(grouped), l2, path)
            noise.append({name: getattr(made, name) for name in _LEVEL_FIELDS})
        margins = tuple(
            MarginMeasurement(columns=columns, **level)
            for columns, level in zip(self.resolved.margin_columns, noise[1:], strict=True)
        )
        return noise[0], margins

    def _l2(self, level: int, grouped: bool, bounds: tuple[int, int]) -> Sensitivity:
        """Δ2² of a level, computed only by a noise family calibrated to it."""
        return lambda: level_l2(self.resolved, self.neighbours, level, grouped, *bounds)


_LEVEL_FIELDS = tuple(LevelNoise.__dataclass_fields__)


def internal_name(stat_kind: str, stat_name: str, part: str) -> str:
    """Name of a measurement a statistic makes for itself (a mean's sum and count); ':' keeps it
    apart from every name a spec can give (see `spec.NAME_PATTERN`)."""
    return f"{stat_kind}:{stat_name}:{part}"
