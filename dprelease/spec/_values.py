"""What a statistic's values are, whatever its kind: the columns it adds to a release, the bounds
a declared number may have, what one kept row adds to a measurement (`RowValue`, whose range
every sensitivity rests on), survey weights, and the exact decimals grids and p's are read as.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from pydantic import Field, field_validator

from dprelease.errors import SpecError
from dprelease.spec._base import Positive, Renamed

#: Suffix of the generated margin-of-error column of a statistic: the half-width of its 95%
#: interval (value ± margin).
MOE95_SUFFIX = "_moe95"
#: Suffix of a mean's flag column: true where the noisy count is ≤ 0 and the mean is null.
UNDEFINED_SUFFIX = "_undefined"
#: A mean's flag column: true where its margin covers its whole [lower, upper].
UNINFORMATIVE_SUFFIX = "_uninformative"
#: The column that names each row's level in a release with margins ("region,clinic", "total").
LEVEL_COLUMN = "level"
#: Suffixes of a quantile's interval columns: the 95% interval [low, high] around each value.
LOW_SUFFIX = "_low"
HIGH_SUFFIX = "_high"
#: Most grid points a quantile's column may have (the mechanism draws one coin per point).
MAX_GRID_POINTS = 1 << 20
#: Largest |bound| a sum or mean may declare: beyond 2^53 a float no longer holds every integer,
#: and the noise scale and variance stated in the manifest could overflow.
MAX_ABS_BOUND = 2.0**53


def check_quantile_levels(ps: Sequence[Fraction], field: str) -> None:
    """Refuse a list of quantile levels p that is empty, repeats one, or has one outside (0, 1).

    The spec and `plan_quantiles` both take p from users; one check keeps their words the same.
    A p's denominator is bounded so that its rank target stays exact at any cell size.
    """
    if not ps:
        raise SpecError(field, "name at least one p")
    if len(set(ps)) != len(ps):
        raise SpecError(field, "each p may appear once")
    for p in ps:
        if not 0 < p < 1:
            raise SpecError(field, f"{float(p):g} is not strictly between 0 and 1")
        if p.denominator > MAX_GRID_POINTS:
            raise SpecError(
                field,
                f"{float(p):g}: give p with at most 6 decimals (a denominator of at most 2^20)",
            )


class SurveyWeight(Renamed):
    """A survey weight column and its declared upper bound W: every row counts w times.

    A weighted count is Σ w, a weighted sum Σ w·x, a weighted mean Σ w·x / Σ w. Each row's w is
    clamped to [0, W] like any value (null, NaN or text that does not parse counts as 0, the
    nulls rule for bounds that hold 0), so one row moves a weighted count by at most W and a
    weighted sum by at most W·max(|lower|, |upper|): W sets the sensitivity, as bounds do.
    """

    column: str
    upper: Positive = Field(description="W: the largest weight one row counts with")

    @field_validator("upper")
    @classmethod
    def _representable(cls, upper: float) -> float:
        if upper > MAX_ABS_BOUND:
            raise ValueError(
                "must be at most 2^53 (about 9.007e15); express the weights in larger units"
            )
        return upper


#: A weighted quantile's default weight step leaves W between 2^16 and 2^17 steps; at most 2^20.
WEIGHT_BITS = 16
MAX_WEIGHT_STEPS = 1 << 20


def weight_steps(weight: SurveyWeight, resolution: float | None) -> tuple[Fraction, int]:
    """(g, W_g): the step a weighted quantile rounds each weight to, and W in steps (the most
    weight mass one row adds). Default: the power of two with 2^16 ≤ W/g < 2^17, so rounding
    moves a weight by at most W/2^17; exact, from the declared W alone."""
    upper = exact_decimal(weight.upper, "survey_weight.upper")
    if resolution is not None:
        step = exact_decimal(resolution, "weight_resolution")
    else:
        exponent = upper.numerator.bit_length() - upper.denominator.bit_length()
        if Fraction(2) ** exponent > upper:  # now 2^exponent ≤ W < 2^(exponent + 1)
            exponent -= 1
        step = Fraction(2) ** (exponent - WEIGHT_BITS)
    return step, round(upper / step)


@dataclass(frozen=True)
class RowValue:
    """What each kept row adds to a measurement that is not a row count: the value of `column`
    clamped to [lower, upper], times the survey weight clamped to [0, W] if there is one; a
    weighted count (no column) adds the weight alone.

    Only the range of what one row can add enters the sensitivity, and it follows from the
    declared bounds alone:

        sum             [L, U]
        weighted count  [0, W]
        weighted sum    [W·min(L, 0), W·max(U, 0)]   (w = 0 makes 0 reachable even when L > 0)

    so every L1 and L2 bound of a sum holds for the weighted statistics with this range in place
    of [L, U]. The engines clamp each row's units to the range rounded to units, so the bounds
    hold in the integers that are noised, whatever the rounding of the product did.
    """

    column: str | None
    lower: float | None
    upper: float | None
    weight: SurveyWeight | None
    granularity: float | None  # declared; None: automatic
    #: `missing: drop`: a row without a number in `column` adds 0 (it is not one of the
    #: statistic's rows), so 0 is in the range even where [lower, upper] does not hold it
    drop: bool = False

    def __post_init__(self) -> None:
        if self.column is None and self.weight is None:
            raise ValueError("a count of rows adds no value: it has no RowValue")
        if (self.column is None) != (self.lower is None or self.upper is None):
            raise ValueError("a value column needs its bounds, and only a value column has any")

    @classmethod
    def count(cls, weight: SurveyWeight | None) -> RowValue | None:
        """What a count adds per row: its weight (None: a count of rows, which adds 1)."""
        return None if weight is None else cls(None, None, None, weight, None)

    @classmethod
    def present(cls, column: str, weight: SurveyWeight | None) -> RowValue:
        """What a count of the rows with a value in `column` adds per row: 1 (its weight) where
        the column has a number, else 0 (the value clamped to [1, 1], dropped where missing).
        Its range [0, 1] ([0, W]) makes its Δ a count's under add/remove, and under
        substitution counts a row whose value goes missing (a count of rows would not)."""
        return cls(column, 1.0, 1.0, weight, None if weight is not None else 1.0, drop=True)

    @property
    def range(self) -> tuple[Fraction, Fraction]:
        """The smallest and largest value one row can add (exact, from the declared bounds)."""
        weight = None if self.weight is None else Fraction(self.weight.upper)
        if self.lower is None or self.upper is None:  # a weighted count: the weight alone
            return Fraction(0), weight or Fraction(0)
        lower, upper = Fraction(self.lower), Fraction(self.upper)
        if self.drop:  # a row without a value adds 0
            lower, upper = min(lower, Fraction(0)), max(upper, Fraction(0))
        if weight is None:
            return lower, upper
        return weight * min(lower, Fraction(0)), weight * max(upper, Fraction(0))

    @property
    def largest(self) -> Fraction:
        """The largest |value| one row can add: Δ per row under add/remove."""
        low, high = self.range
        return max(abs(low), abs(high))

    @property
    def what(self) -> str:
        """The measurement in words: "sum", "weighted sum" or "weighted count"."""
        if self.lower is not None and self.lower == self.upper:  # `present`
            return f"{'weighted ' if self.weight else ''}count of rows with a value"
        if self.weight is None:
            return "sum"
        return "weighted count" if self.column is None else "weighted sum"

    def weighted(self, bounds: str) -> str | None:
        """How a weighted row's value comes to lie within `bounds` (its range, as shown), in
        words for a manifest's derivation; None unweighted."""
        if self.weight is None:
            return None
        weight = f"weight {self.weight.column!r} clamped to [0, {self.weight.upper:g}]"
        if self.column is None:
            return f"each row adds its {weight}, within {bounds}"
        return (
            f"each row adds its {weight} × its value clamped to [{self.lower:g}, "
            f"{self.upper:g}], within [W·min(lower, 0), W·max(upper, 0)] = {bounds}"
        )

    def serves(self, wanted: RowValue) -> bool:
        """Whether a measurement of this value can stand for one of `wanted` (a mean reuses a
        sum of its column, bounds and weight; of its granularity, if it declares one)."""
        return (self.column, self.lower, self.upper, self.weight, self.drop) == (
            wanted.column,
            wanted.lower,
            wanted.upper,
            wanted.weight,
            wanted.drop,
        ) and wanted.granularity in (None, self.granularity)


def exact_decimal(value: float | str, what: str) -> Fraction:
    """A number as the decimal it was written as (YAML's 0.1 is 1/10, not the nearest binary
    float), so grids and p's are exact rationals; ValueError naming `what` otherwise."""
    try:
        exact = Fraction(str(value))
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(float(exact)):
        raise ValueError(f"{what} must be finite")
    return exact


def percent_text(p: Fraction) -> str:
    """100·p as a column name's digits: 25, 50, 99_9 (decimal point as '_')."""
    percent = Decimal(p.numerator * 100) / Decimal(p.denominator)
    return format(percent.normalize(), "f").replace(".", "_")


def check_bounds(lower: float, upper: float) -> None:
    """Refuse declared bounds a sensitivity cannot rest on (ValueError, in the statistic's
    fields): not finite, beyond ±2^53 (where a float no longer holds every integer, and the
    noise scale and variance stated could overflow), or not lower < upper."""
    if not (math.isfinite(lower) and math.isfinite(upper)):
        raise ValueError("bounds must be finite numbers")
    if max(abs(lower), abs(upper)) > MAX_ABS_BOUND:
        raise ValueError(
            "bounds must lie within ±2^53 (about ±9.007e15); express the column in larger "
            "units (thousands, millions)"
        )
    if lower >= upper:
        raise ValueError(f"lower ({lower}) must be < upper ({upper})")


def grid_points(lower: Fraction, upper: Fraction, resolution: Fraction) -> int:
    """B, the points of the grid lower, lower + resolution, …, upper; SpecError naming the
    field unless the step is positive, the bounds ordered, the step divides upper − lower (so
    both bounds are grid points) and B is at most MAX_GRID_POINTS."""
    if resolution <= 0:
        raise SpecError("resolution", "must be positive")
    if upper <= lower:
        raise SpecError("upper", "must be above lower")
    steps = (upper - lower) / resolution
    if steps.denominator != 1:
        raise SpecError(
            "resolution",
            f"must divide upper − lower ({float(upper):g} − {float(lower):g}) so both bounds "
            "are grid points",
        )
    if steps + 1 > MAX_GRID_POINTS:
        raise SpecError(
            "resolution",
            f"gives {steps + 1} grid points; at most {MAX_GRID_POINTS}: make it coarser",
        )
    return int(steps) + 1
