"""What a statistic's declared bounds imply before any discretization, and what its target
margin of error needs: the accuracy-first split of a release's loss (`allocate` with targets)
is in proportion to these needs, and the planner's search for the smallest ε starts from the
same bounds."""

from __future__ import annotations

import math
from fractions import Fraction

from dprelease.change import ProtectedChange
from dprelease.loss import Measure, Mechanism
from dprelease.mechanism._l1 import rows_reach
from dprelease.mechanism._l2 import level_l2
from dprelease.mechanism._values import row_value
from dprelease.mechanism.noise import noise_family
from dprelease.spec import CountStatistic, ReleaseSpec, ResolvedSpec, SumStatistic


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


def need(
    stat: CountStatistic | SumStatistic,
    resolved: ResolvedSpec,
    neighbours: ProtectedChange,
    measure: Measure,
    mechanism: Mechanism,
) -> Fraction:
    """What a statistic needs for its target margin h (continuous approximations, in exact
    rationals): the accuracy-first split is in proportion to these. Each noise family says how
    its loss follows from the target and Δ1 or Δ2² (`NoiseFamily.need`)."""
    target = Fraction(stat.target_moe95 or 0)  # the spec has targets on every count and sum or none
    return noise_family(mechanism).need(
        target,
        lambda: sensitivity_bound(stat, resolved.spec, neighbours),
        lambda: sensitivity_squared_bound(stat, resolved, neighbours),
        measure,
    )
