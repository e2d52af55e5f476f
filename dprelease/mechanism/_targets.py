"""What a statistic's declared bounds imply before any discretization, and what its target
margin of error needs: the accuracy-first split of a release's loss (`allocate` with targets)
is in proportion to these needs, and the planner's search for the smallest ε starts from the
same bounds."""

from __future__ import annotations

import math
from fractions import Fraction

from dprelease.change import ProtectedChange
from dprelease.loss import Measure, Mechanism, zcdp_of_pure
from dprelease.mechanism._l1 import rows_reach
from dprelease.mechanism._l2 import level_l2
from dprelease.mechanism._values import row_value
from dprelease.spec import CountStatistic, ReleaseSpec, ResolvedSpec, SumStatistic

#: P(|Laplace| > t) = exp(-t/b): the 95% half-width of Laplace(b) is b·ln(20).
LN_20 = math.log(20)


def sensitivity_bound(
    stat: CountStatistic | SumStatistic, spec: ReleaseSpec, neighbours: ProtectedChange
) -> Fraction:
    """Δ of a count or sum in its own units, before discretization (granularity → 0)."""
    reach = rows_reach(spec, neighbours)
    value = row_value(stat, spec)
    return Fraction(reach) if value is None else reach * value.largest


def sensitivity_squared_bound(
    stat: CountStatistic | SumStatistic, resolved: ResolvedSpec, neighbours: ProtectedChange
) -> Fraction:
    """Δ2² of a count or sum at the cells, in its own units², before discretization (from the
    range of one row's value: weighted when weighted)."""
    value = row_value(stat, resolved.spec)
    lower, upper = (Fraction(1), Fraction(1)) if value is None else value.range
    scale = math.lcm(lower.denominator, upper.denominator)  # exact integer bounds, then back
    squared, _ = level_l2(
        resolved,
        neighbours,
        0,
        resolved.level_grouped[0],
        int(lower * scale),
        int(upper * scale),
    )
    return Fraction(squared, scale * scale)


#: z of the normal 97.5% quantile: a Gaussian's 95% margin is about z·σ.
_Z95 = Fraction(196, 100)


def need(
    stat: CountStatistic | SumStatistic,
    resolved: ResolvedSpec,
    neighbours: ProtectedChange,
    measure: Measure,
    mechanism: Mechanism,
) -> Fraction:
    """What a statistic needs for its target margin h (continuous approximations, in exact
    rationals): the accuracy-first split is in proportion to these. Laplace: ε = Δ1·ln(20)/h,
    charged ε (pure) or ε²/2 (zCDP); Gaussian: ρ = Δ2²·z²/(2h²)."""
    assert stat.target_moe95 is not None  # the spec has targets on every count and sum or none
    target = Fraction(stat.target_moe95)
    if mechanism is Mechanism.GAUSSIAN:
        squared = sensitivity_squared_bound(stat, resolved, neighbours)
        return squared * _Z95 * _Z95 / (2 * target * target)
    epsilon = sensitivity_bound(stat, resolved.spec, neighbours) * Fraction(LN_20) / target
    return epsilon if measure is Measure.PURE else zcdp_of_pure(epsilon)
