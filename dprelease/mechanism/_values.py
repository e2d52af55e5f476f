"""What one kept row adds to a measurement, and the range its sensitivity rests on.

A count of rows adds 1 per row. Every other measurement adds a value per row, in integer units
of its granularity: a sum the column's value clamped to [lower, upper]; with a survey weight w
clamped to [0, W], a weighted sum the product w·x and a weighted count the weight w alone. Only
the range of what one row can add enters the sensitivity, and it follows from the declared
bounds alone:

    sum             [L, U]
    weighted count  [0, W]
    weighted sum    [W·min(L, 0), W·max(U, 0)]   (w = 0 makes 0 reachable even when L > 0)

so every L1 bound (`_l1`) and L2 bound (`_l2`) of a sum holds for the weighted statistics with
this range in place of [L, U]: Δ1 = R·W for a weighted count and R·W·max(|L|, |U|) for a weighted
sum under add/remove, Δ2 = W·C for a weighted count. The engines clamp each row's units to the
range rounded to units (`Measurement.lower_units`, `upper_units`), so the bounds hold in the
integers that are noised, whatever the rounding of the product did.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from dprelease.spec import (
    CountStatistic,
    MeanStatistic,
    ReleaseSpec,
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

    @property
    def what(self) -> str:
        """The measurement in words: "sum", "weighted sum" or "weighted count"."""
        if self.weight is None:
            return "sum"
        return "weighted count" if self.column is None else "weighted sum"

    def weighted(self, bounds: str) -> str:
        """How a weighted row's value comes to lie within `bounds` (its range, as shown), in
        words for a manifest's derivation."""
        assert self.weight is not None
        weight = f"weight {self.weight.column!r} clamped to [0, {self.weight.upper:g}]"
        if self.column is None:
            return f"each row adds its {weight}, within {bounds}"
        return (
            f"each row adds its {weight} × its value clamped to [{self.lower:g}, "
            f"{self.upper:g}], within [W·min(lower, 0), W·max(upper, 0)] = {bounds}"
        )


def row_value(
    stat: CountStatistic | SumStatistic | MeanStatistic,
    spec: ReleaseSpec,
    part: StatisticKind | None = None,
) -> RowValue | None:
    """What each kept row adds to a statistic's measurement (a mean's `part`: its COUNT or its
    SUM; a count's or a sum's own by default); None for a count of rows."""
    weight = spec.survey_weight_of(stat)
    if isinstance(stat, CountStatistic) or part is StatisticKind.COUNT:
        return None if weight is None else RowValue(None, None, None, weight, None)
    return RowValue(stat.column, stat.lower, stat.upper, weight, stat.granularity)
