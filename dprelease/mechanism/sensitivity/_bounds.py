"""What a statistic's declared bounds imply before any discretization: Δ1 and Δ2² in the
statistic's own units (granularity → 0). The accuracy-first split of a release's loss is in
proportion to what each target needs of them, and the planner's search for the smallest ε starts
from the same bounds."""

from __future__ import annotations

import math
from fractions import Fraction

from dprelease.change import ProtectedChange
from dprelease.mechanism.sensitivity._l1 import rows_reach
from dprelease.mechanism.sensitivity._l2 import level_l2
from dprelease.spec import ReleaseSpec, ResolvedSpec, StatisticModel


def sensitivity_bound(
    stat: StatisticModel, spec: ReleaseSpec, neighbours: ProtectedChange
) -> Fraction:
    """Δ of a count or sum in its own units, before discretization (granularity → 0)."""
    reach = rows_reach(spec, neighbours)
    value = stat.row_value(spec)
    return Fraction(reach) if value is None else reach * value.largest


def sensitivity_squared_bound(
    stat: StatisticModel, resolved: ResolvedSpec, neighbours: ProtectedChange
) -> Fraction:
    """Δ2² of a count or sum at the cells, in its own units², before discretization (from the
    range of one row's value: weighted when weighted)."""
    value = stat.row_value(resolved.spec)
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
