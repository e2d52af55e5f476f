"""Sensitivity: how far one privacy unit can move a measurement, from the declared bounds alone.

A unit keeps at most R rows (`l1_reach`: 2R under substitution on a grouped level, whose added
rows may sit in other groups). What each kept row adds is 1 for a count of rows; for every other
measurement a value in integer units of its granularity (`RowValue`): a sum the column's value
clamped to [lower, upper]; with a survey weight w clamped to [0, W], a weighted sum the product
w·x and a weighted count the weight w alone. Only the range of what one row can add enters:

    sum             [L, U]
    weighted count  [0, W]
    weighted sum    [W·min(L, 0), W·max(U, 0)]   (w = 0 makes 0 reachable even when L > 0)

so every L1 and L2 bound of a sum holds for the weighted statistics with this range in place of
[L, U]: Δ = R·W for a weighted count and R·W·max(|L|, |U|) for a weighted sum under add/remove,
and the L2 bounds of `_l2` with the weighted range (W·C for a weighted count). The engines clamp
each row's units to the range rounded to units (`Measurement.lower_units`, `upper_units`), so
the bounds hold in the integers that are noised, whatever the rounding of the product did.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from dprelease.change import ProtectedChange
from dprelease.mechanism._l2 import contribution, l2_derivation, l2_squared
from dprelease.spec import (
    CountStatistic,
    ReleaseSpec,
    ResolvedSpec,
    Statistic,
    StatisticKind,
    SumStatistic,
    SurveyWeight,
)


@dataclass(frozen=True)
class RowValue:
    """What each kept row adds to a measurement that is not a row count: the value of `column`
    clamped to [lower, upper], times the survey weight clamped to [0, W] if there is one; a
    weighted count (no column) adds the weight alone."""

    column: str | None
    lower: float | None
    upper: float | None
    weight: SurveyWeight | None
    granularity: float | None  # declared; None: automatic

    @property
    def range(self) -> tuple[Fraction, Fraction]:
        """The smallest and largest value one row can add (exact, from the declared bounds)."""
        if self.lower is None or self.upper is None:
            assert self.weight is not None  # only a weighted count has no value column
            return Fraction(0), Fraction(self.weight.upper)
        lower, upper = Fraction(self.lower), Fraction(self.upper)
        if self.weight is None:
            return lower, upper
        weight = Fraction(self.weight.upper)
        return weight * min(lower, Fraction(0)), weight * max(upper, Fraction(0))

    @property
    def largest(self) -> Fraction:
        """The largest |value| one row can add: Δ per row under add/remove."""
        low, high = self.range
        return max(abs(low), abs(high))

    def clamped(self, lower_units: int, upper_units: int, granularity: str) -> str:
        """How each row's value is bounded, in words, for a manifest's derivation."""
        units = f"[{lower_units}, {upper_units}] units of {granularity}"
        if self.weight is None:
            return f"each clamped to {units}"
        weight = f"weight {self.weight.column!r} clamped to [0, {self.weight.upper:g}]"
        if self.column is None:
            return f"each row adds its {weight}, in {units}"
        return (
            f"each row adds its {weight} × its value clamped to [{self.lower:g}, "
            f"{self.upper:g}], in [W·min(lower, 0), W·max(upper, 0)] = {units}"
        )


def row_value(
    stat: Statistic, spec: ReleaseSpec, part: StatisticKind | None = None
) -> RowValue | None:
    """What each kept row adds to a statistic's measurement (a mean's `part`: its COUNT or its
    SUM; a count's or a sum's own by default); None for a count of rows."""
    weight = spec.survey_weight_of(stat)
    if isinstance(stat, CountStatistic) or part is StatisticKind.COUNT:
        return None if weight is None else RowValue(None, None, None, weight, None)
    return RowValue(stat.column, stat.lower, stat.upper, weight, stat.granularity)


def sum_sensitivity(
    what: str,
    value: RowValue,
    units: tuple[int, int],
    granularity: Fraction,
    reach: tuple[int, str],
    replaced: int | None,
) -> tuple[int, str]:
    """Δ in integer units of `what` ("sum", "weighted count", "weighted sum") whose rows each
    add a value in `units` of `granularity`, and how it follows: `reach` rows (with the reason)
    move in L1, each by at most the largest |value|; or, under substitution on a level of one
    row (an ungrouped release, a grand total), `replaced` rows are replaced in place, each
    moving it by at most the range's span."""
    g = f"{float(granularity):g}"
    lower_u, upper_u = units
    if replaced is not None:
        span = max(upper_u, 0) - min(lower_u, 0)
        delta = replaced * span
        each = (
            f"each in [{lower_u}, {upper_u}] units of {g}"
            if value.weight is None
            else value.clamped(lower_u, upper_u, g)
        )
        return delta, (
            f"{what}: one unit's ≤ {replaced} row(s) replaced, {each} → "
            f"Δ = {replaced} × {span} = {delta} units"
        )
    rows, reason = reach
    largest = max(abs(lower_u), abs(upper_u))
    delta = rows * largest
    return delta, (
        f"{what}: {reason}; {value.clamped(lower_u, upper_u, g)} → "
        f"Δ = {rows} × {largest} = {delta} units"
    )


def l1_reach(spec: ReleaseSpec, neighbours: ProtectedChange, grouped: bool) -> tuple[int, str]:
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
    """Rows one privacy unit can move in L1 over the cells (see `l1_reach`)."""
    return l1_reach(spec, neighbours, bool(spec.group_by))[0]


def count_sensitivity(
    spec: ReleaseSpec, neighbours: ProtectedChange, grouped: bool
) -> tuple[int, str]:
    """Δ of a count of rows on a level (grouped or not), and how it follows."""
    reach, reason = l1_reach(spec, neighbours, grouped)
    return reach, f"count: {reason} → Δ = {reach}"


def level_l2(
    resolved: ResolvedSpec,
    neighbours: ProtectedChange,
    level: int,
    grouped: bool,
    lower_u: int,
    upper_u: int,
) -> tuple[int, str]:
    """Δ2² of a level in integer units² and why (`mechanism._l2`)."""
    spec = resolved.spec
    bound = contribution(
        spec.rows_per_unit,
        spec.max_rows_per_group if spec.privacy_unit is not None else None,
        resolved.level_cells_per_row[level],
        lower_u,
        upper_u,
    )
    one_row = not grouped
    return l2_squared(bound, neighbours, one_row), l2_derivation(bound, neighbours, one_row)


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
