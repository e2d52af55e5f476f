"""From a spec and a total ε to measurements: sensitivity, budget share, granularity, noise scale.

Everything here is computed from declared, public settings, never from data, so the plan and the
manifest built from it can be published as they are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from dprelease.errors import SpecError
from dprelease.noise import ci95_halfwidth, exact_scale, variance
from dprelease.profile import Neighbours
from dprelease.spec import ReleaseSpec, Statistic, StatisticKind

#: Automatic granularity sits this many binary orders of magnitude below the noise scale, so the
#: rounding to integer units is negligible against the noise it is hidden in.
GRANULARITY_HEADROOM_BITS = 20
#: P(|Laplace| > t) = exp(-t/b): the 95% half-width of Laplace(b) is b·ln(20).
LN_20 = math.log(20)
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class ContributionBounds:
    """What one privacy unit can contribute after bounding: rows in total and per group."""

    max_rows_per_unit: int
    max_groups_per_unit: int | None
    max_rows_per_group: int | None

    @property
    def max_rows_total(self) -> int:
        """L1 reach of one unit in rows: total cap, tightened by groups × rows per group."""
        rows = self.max_rows_per_unit
        if self.max_groups_per_unit and self.max_rows_per_group:
            rows = min(rows, self.max_groups_per_unit * self.max_rows_per_group)
        return rows

    @classmethod
    def of(cls, spec: ReleaseSpec) -> ContributionBounds:
        return cls(spec.max_rows_per_unit, spec.max_groups_per_unit, spec.max_rows_per_group)


@dataclass(frozen=True)
class Measurement:
    """One noisy integer vector over the key grid: a count or a sum in units of `granularity`."""

    name: str
    kind: StatisticKind  # COUNT or SUM only
    column: str | None
    lower: float | None
    upper: float | None
    granularity: Fraction  # 1 for counts
    lower_units: int
    upper_units: int
    sensitivity_units: int
    derivation: str
    epsilon: Fraction
    scale_units: Fraction  # exact discrete Laplace scale, ≥ sensitivity_units / epsilon

    @property
    def sensitivity(self) -> float:
        return float(self.sensitivity_units * self.granularity)

    @property
    def scale(self) -> float:
        return float(self.scale_units * self.granularity)

    @property
    def ci95(self) -> float:
        return float(ci95_halfwidth(self.scale_units) * self.granularity)

    @property
    def variance(self) -> float:
        return variance(self.scale_units) * float(self.granularity) ** 2

    def max_abs_units(self) -> int:
        return max(abs(self.lower_units), abs(self.upper_units))


@dataclass(frozen=True)
class StatisticPlan:
    """How a released column is made: a count or sum is one measurement; a mean is sum / count."""

    statistic: Statistic
    epsilon: Fraction
    measurement: Measurement  # the count, or the sum for `sum` and `mean`
    count: Measurement | None = None  # the denominator of a mean


@dataclass(frozen=True)
class Plan:
    statistics: list[StatisticPlan]
    measurements: list[Measurement]
    epsilon_total: Fraction
    split: str


def _l1_reach(bounds: ContributionBounds, neighbours: Neighbours, grouped: bool) -> tuple[int, str]:
    """Rows one unit can move in L1, and why. Substitution = one removal plus one addition."""
    rows = bounds.max_rows_total
    reason = f"one unit contributes at most {rows} row(s)"
    if bounds.max_groups_per_unit and bounds.max_rows_per_group and rows < bounds.max_rows_per_unit:
        reason += (
            f" (≤ {bounds.max_groups_per_unit} group(s) × {bounds.max_rows_per_group} "
            f"row(s) per group)"
        )
    if neighbours is Neighbours.SUBSTITUTE and grouped:
        return (
            2 * rows,
            reason + "; substitution removes those rows and adds as many (possibly "
            "in other groups): ×2",
        )
    return rows, reason


def _count_sensitivity(
    bounds: ContributionBounds, neighbours: Neighbours, grouped: bool
) -> tuple[int, str]:
    reach, reason = _l1_reach(bounds, neighbours, grouped)
    return reach, f"count: {reason} → Δ = {reach}"


def _sum_sensitivity(
    bounds: ContributionBounds,
    neighbours: Neighbours,
    grouped: bool,
    lower_u: int,
    upper_u: int,
    granularity: Fraction,
) -> tuple[int, str]:
    g = f"{float(granularity):g}"
    if neighbours is Neighbours.SUBSTITUTE and not grouped:
        rows = bounds.max_rows_total
        span = max(upper_u, 0) - min(lower_u, 0)
        delta = rows * span
        return delta, (
            f"sum: one unit's ≤ {rows} row(s) replaced, each in [{lower_u}, {upper_u}] "
            f"units of {g} → Δ = {rows} × {span} = {delta} units"
        )
    reach, reason = _l1_reach(bounds, neighbours, grouped)
    largest = max(abs(lower_u), abs(upper_u))
    delta = reach * largest
    return delta, (
        f"sum: {reason}; each clamped to [{lower_u}, {upper_u}] units of {g} → "
        f"Δ = {reach} × {largest} = {delta} units"
    )


def auto_granularity(sensitivity: float, epsilon: Fraction) -> Fraction:
    """A power of two far below the noise scale Δ/ε, so discretizing costs nothing visible."""
    scale = sensitivity / float(epsilon)
    exponent = math.floor(math.log2(scale)) - GRANULARITY_HEADROOM_BITS
    return Fraction(2) ** exponent


def split_budget(
    statistics: list[Statistic], epsilon: Fraction, needs: list[Fraction] | None
) -> list[Fraction]:
    """Sequential composition: shares in proportion to weights or needs, summing to ε exactly."""
    raw = needs if needs is not None else [Fraction(s.weight or 1) for s in statistics]
    total = sum(raw, Fraction(0))
    shares = [epsilon * r / total for r in raw[:-1]]
    shares.append(epsilon - sum(shares, Fraction(0)))  # exact: no drift above the total
    return shares


@dataclass(frozen=True)
class _Basis:
    """What every measurement of one release is derived from (all public)."""

    spec: ReleaseSpec
    neighbours: Neighbours
    integer_columns: frozenset[str]


def _measure(
    name: str, kind: StatisticKind, stat: Statistic | None, epsilon: Fraction, basis: _Basis
) -> Measurement:
    spec, neighbours = basis.spec, basis.neighbours
    bounds = ContributionBounds.of(spec)
    grouped = bool(spec.group_by)
    if kind is StatisticKind.COUNT:
        delta, derivation = _count_sensitivity(bounds, neighbours, grouped)
        return Measurement(
            name,
            kind,
            None,
            None,
            None,
            Fraction(1),
            0,
            1,
            delta,
            derivation,
            epsilon,
            exact_scale(Fraction(delta) / epsilon),
        )
    assert stat is not None and stat.lower is not None and stat.upper is not None
    reach, _ = _l1_reach(bounds, neighbours, grouped)
    largest = max(abs(stat.lower), abs(stat.upper))
    path = f"release.statistics[{spec.statistics.index(stat)}].granularity"
    if stat.granularity:
        granularity = Fraction(stat.granularity)
    elif (
        stat.column in basis.integer_columns and stat.lower.is_integer() and stat.upper.is_integer()
    ):
        granularity = Fraction(1)  # integer data in integer bounds: exact, integer-valued sums
    else:
        granularity = auto_granularity(reach * largest, epsilon)
    lower_u = round(Fraction(stat.lower) / granularity)
    upper_u = round(Fraction(stat.upper) / granularity)
    if lower_u == upper_u:
        raise SpecError(
            path,
            "granularity is coarser than the bounds' range; choose a smaller one",
        )
    delta, derivation = _sum_sensitivity(bounds, neighbours, grouped, lower_u, upper_u, granularity)
    if delta > 2**53:
        raise SpecError(
            path,
            "granularity too fine for these bounds (sensitivity above 2^53 units)",
        )
    return Measurement(
        name,
        kind,
        stat.column,
        stat.lower,
        stat.upper,
        granularity,
        lower_u,
        upper_u,
        delta,
        derivation,
        epsilon,
        exact_scale(Fraction(delta) / epsilon),
    )


def _need(stat: Statistic, spec: ReleaseSpec, neighbours: Neighbours) -> Fraction:
    """ε a statistic needs for its target half-width, Δ·ln(20)/target (DESIGN §5)."""
    bounds = ContributionBounds.of(spec)
    reach, _ = _l1_reach(bounds, neighbours, bool(spec.group_by))
    delta = (
        reach if stat.kind is StatisticKind.COUNT else reach * max(abs(stat.lower), abs(stat.upper))
    )
    return Fraction(delta * LN_20 / stat.target_ci95)


def plan_release(
    spec: ReleaseSpec,
    epsilon: Fraction,
    neighbours: Neighbours,
    integer_columns: frozenset[str] = frozenset(),
) -> Plan:
    """Split ε over the statistics and derive every measurement's sensitivity and noise scale.

    `integer_columns` (from the input's schema) are summed in units of 1 when their bounds are
    integers; other sums get an automatic power-of-two granularity far below the noise.

    A mean reuses the release's first count as its denominator (post-processing, no extra ε);
    without one it spends half of its share on a count of its own.
    """
    if epsilon <= 0:
        raise SpecError("epsilon", "ε must be > 0")
    basis = _Basis(spec, neighbours, integer_columns)
    accuracy_first = spec.statistics[0].target_ci95 is not None
    needs = [_need(s, spec, neighbours) for s in spec.statistics] if accuracy_first else None
    shares = dict(
        zip(
            (s.name for s in spec.statistics),
            split_budget(spec.statistics, epsilon, needs),
            strict=True,
        )
    )
    counts = {
        s.name: _measure(s.name, s.kind, None, shares[s.name], basis)
        for s in spec.statistics
        if s.kind is StatisticKind.COUNT
    }
    shared_count = next(iter(counts.values()), None)
    plans: list[StatisticPlan] = []
    for stat in spec.statistics:
        share = shares[stat.name]
        if stat.kind is StatisticKind.COUNT:
            plans.append(StatisticPlan(stat, share, counts[stat.name]))
        elif stat.kind is StatisticKind.SUM:
            plans.append(
                StatisticPlan(stat, share, _measure(stat.name, stat.kind, stat, share, basis))
            )
        else:
            count, sum_share = shared_count, share
            if count is None:
                sum_share = share / 2
                count = _measure(
                    f"{stat.name}__count",
                    StatisticKind.COUNT,
                    None,
                    share - sum_share,
                    basis,
                )
            total = _measure(f"{stat.name}__sum", StatisticKind.SUM, stat, sum_share, basis)
            plans.append(StatisticPlan(stat, share, total, count))
    measurements = {m.name: m for p in plans for m in (p.measurement, p.count) if m is not None}
    return Plan(
        plans,
        list(measurements.values()),
        epsilon,
        "accuracy targets" if accuracy_first else "weights",
    )


def check_no_overflow(measurement: Measurement, rows: int) -> None:
    """int64 aggregation is exact only if rows × max|value| fits; checked before noise is added.

    `rows` is data-derived and never appears in the message.
    """
    if rows * measurement.max_abs_units() > _INT64_MAX:
        raise SpecError(
            "release.statistics",
            f"the exact int64 sum of {measurement.name!r} could overflow; give its statistic a "
            "coarser 'granularity'",
        )
