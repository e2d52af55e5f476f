"""Statistic kinds: what one released column computes, with the bounds its sensitivity rests on.

A new statistic kind starts here (its model and its output columns), then gets its sensitivity in
`mechanism` (accounting), its aggregate in both engines, its released columns in post-processing
and its manifest entry in `statement`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from fractions import Fraction
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from dprelease.errors import SpecError
from dprelease.spec._base import NAME_PATTERN, Positive, Renamed


class StatisticKind(StrEnum):
    COUNT = "count"
    SUM = "sum"
    MEAN = "mean"
    QUANTILE = "quantile"
    MEDIAN = "median"  # a quantile at p = 1/2


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


class _StatisticBase(Renamed):
    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    kind: StatisticKind  # each kind narrows it to its own (the union's tag)
    weight: Positive | None = Field(
        default=None, description="share of ε in proportion to the weights (default 1)"
    )
    survey_weight: SurveyWeight | None = Field(
        default=None,
        description="weight every row by this survey weight column (default: the release's "
        "survey_weight, if any)",
    )


class CountStatistic(_StatisticBase):
    """Rows per cell (after contribution bounding)."""

    kind: Literal[StatisticKind.COUNT] = StatisticKind.COUNT
    target_moe95: Positive | None = Field(
        default=None, description="wanted 95% margin of error: splits ε by accuracy targets"
    )


class _Bounded(_StatisticBase):
    """A statistic of a column's values, which need declared bounds (they set Δ)."""

    column: str
    lower: float
    upper: float
    granularity: Positive | None = Field(
        default=None,
        description="unit of discretization; default: a power of two 2^20 below the noise scale",
    )

    @model_validator(mode="before")
    @classmethod
    def _declared(cls, data: Any) -> Any:
        if isinstance(data, dict):
            kind = cls.model_fields["kind"].default.value
            if "column" not in data:
                raise ValueError(f"{kind} needs 'column'")
            if "lower" not in data or "upper" not in data:
                raise ValueError(f"{kind} needs declared 'lower' and 'upper' bounds")
        return data

    @model_validator(mode="after")
    def _bounds(self) -> _Bounded:
        if not (math.isfinite(self.lower) and math.isfinite(self.upper)):
            raise ValueError("bounds must be finite numbers")
        if max(abs(self.lower), abs(self.upper)) > MAX_ABS_BOUND:
            raise ValueError(
                "bounds must lie within ±2^53 (about ±9.007e15); express the column in larger "
                "units (thousands, millions)"
            )
        if self.lower >= self.upper:
            raise ValueError(f"lower ({self.lower}) must be < upper ({self.upper})")
        return self


class SumStatistic(_Bounded):
    """The sum per cell of a column clamped to [lower, upper]."""

    kind: Literal[StatisticKind.SUM] = StatisticKind.SUM
    target_moe95: Positive | None = Field(
        default=None, description="wanted 95% margin of error: splits ε by accuracy targets"
    )

    @model_validator(mode="after")
    def _one_split(self) -> SumStatistic:
        if self.weight is not None and self.target_moe95 is not None:
            raise ValueError("give either 'weight' or 'target_moe95', not both")
        return self


class MeanStatistic(_Bounded):
    """Noisy sum / noisy count per cell (post-processing). It reuses the release's count and a
    sum of the same column and bounds, and spends ε only on what it cannot reuse."""

    kind: Literal[StatisticKind.MEAN] = StatisticKind.MEAN

    @model_validator(mode="before")
    @classmethod
    def _no_target(cls, data: Any) -> Any:
        if isinstance(data, dict) and "target_moe95" in data:
            raise SpecError(
                "target_moe95",
                "a mean takes no target_moe95 (its margin depends on each cell's count); target "
                "the count and a sum of the same column and bounds, which the mean reuses",
            )
        return data


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


class QuantileStatistic(_StatisticBase):
    """Quantiles per cell of a column clamped to [lower, upper] and rounded to a public grid of
    step `resolution`, each with a 95% interval; `median` is the quantile at p = 0.5. Exact
    permute-and-flip over the grid (`mechanism.quantiles`); its error is stated in ranks."""

    kind: Literal[StatisticKind.QUANTILE, StatisticKind.MEDIAN]
    column: str
    lower: float
    upper: float
    resolution: Positive = Field(
        description="step of the public grid the values are rounded to; divides upper − lower"
    )
    p: list[float] | None = Field(
        default=None,
        description="the quantiles, each strictly between 0 and 1 (0.25, 0.5, 0.75); one "
        "number or a list. A median takes none",
    )
    interval_share: float | None = Field(
        default=None,
        description="the share of this statistic's ε spent on its 95% intervals, strictly "
        "between 0 and 1: more narrows the intervals and costs the values accuracy (default: "
        "1/40 for one p, 1/10 for several)",
    )

    @model_validator(mode="before")
    @classmethod
    def _declared(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        kind = data.get("kind")
        for needed in ("column", "lower", "upper", "resolution"):
            if needed not in data:
                raise ValueError(f"{kind} needs {needed!r} (a grid: lower, upper, resolution)")
        if "target_moe95" in data:
            raise SpecError(
                "target_moe95",
                f"a {kind} takes no target_moe95: its error in the column's units depends on "
                "the data near each quantile; `dprelease plan` states its 95% rank error. Give "
                "it a 'weight' instead",
            )
        if "granularity" in data:
            raise SpecError("granularity", f"a {kind} is discretized by 'resolution'")
        if kind == StatisticKind.MEDIAN.value and "p" in data:
            raise SpecError("p", "a median is the quantile at p = 0.5; use kind: quantile")
        if kind == StatisticKind.QUANTILE.value:
            if data.get("p") is None:
                raise ValueError("quantile needs 'p': one number or a list, e.g. [0.25, 0.5]")
            if not isinstance(data["p"], list):
                data = {**data, "p": [data["p"]]}
        return data

    @model_validator(mode="after")
    def _grid(self) -> QuantileStatistic:
        if not (math.isfinite(self.lower) and math.isfinite(self.upper)):
            raise ValueError("bounds must be finite numbers")
        if max(abs(self.lower), abs(self.upper)) > MAX_ABS_BOUND:
            raise ValueError("bounds must lie within ±2^53 (about ±9.007e15)")
        if self.lower >= self.upper:
            raise ValueError(f"lower ({self.lower}) must be < upper ({self.upper})")
        steps = (self.upper_exact - self.lower_exact) / self.resolution_exact
        if steps.denominator != 1:
            raise SpecError(
                "resolution",
                f"must divide upper − lower ({self.upper:g} − {self.lower:g}) so both bounds are "
                "grid points",
            )
        if steps + 1 > MAX_GRID_POINTS:
            raise SpecError(
                "resolution",
                f"gives {steps + 1} grid points; at most {MAX_GRID_POINTS}: make it coarser",
            )
        if self.interval_share is not None:
            share = exact_decimal(self.interval_share, "interval_share")
            if not 0 < share < 1:
                raise SpecError("interval_share", "must be strictly between 0 and 1")
        check_quantile_levels(self.ps, "p")
        return self

    @property
    def lower_exact(self) -> Fraction:
        return exact_decimal(self.lower, "lower")

    @property
    def upper_exact(self) -> Fraction:
        return exact_decimal(self.upper, "upper")

    @property
    def resolution_exact(self) -> Fraction:
        return exact_decimal(self.resolution, "resolution")

    @property
    def grid_points(self) -> int:
        """B: the grid's points lower, lower + resolution, …, upper."""
        return int((self.upper_exact - self.lower_exact) / self.resolution_exact) + 1

    @property
    def ps(self) -> tuple[Fraction, ...]:
        """The p's as exact decimals, ascending (a median: 1/2)."""
        if self.kind is StatisticKind.MEDIAN or self.p is None:
            return (Fraction(1, 2),)
        return tuple(sorted(exact_decimal(p, "p") for p in self.p))

    def value_columns(self) -> list[str]:
        """The released value column of each p, in the order of `ps`: a median's is its name,
        a quantile's `<name>_p<100·p>` (p = 0.25 → `_p25`, 0.999 → `_p99_9`)."""
        if self.kind is StatisticKind.MEDIAN:
            return [self.name]
        return [f"{self.name}_p{percent_text(p)}" for p in self.ps]


def percent_text(p: Fraction) -> str:
    """100·p as a column name's digits: 25, 50, 99_9 (decimal point as '_')."""
    percent = Decimal(p.numerator * 100) / Decimal(p.denominator)
    return format(percent.normalize(), "f").replace(".", "_")


#: One released column; `kind` says which (the YAML's `kind:` key).
Statistic = Annotated[
    CountStatistic | SumStatistic | MeanStatistic | QuantileStatistic,
    Field(discriminator="kind"),
]
STATISTIC_KINDS = tuple(kind.value for kind in StatisticKind)


@dataclass(frozen=True)
class MeanReuse:
    """What a mean divides: the names of the statistics it reuses (None: a measurement of its
    own, paid from its share)."""

    count: str | None
    sum: str | None

    @property
    def spends(self) -> bool:
        return self.count is None or self.sum is None


def output_columns(stat: Statistic) -> list[str]:
    """The released columns a statistic makes: its values, its margin of error, and for a mean
    the flags of cells where it is undefined and where it is uninformative; for a quantile each
    p's value and interval."""
    if isinstance(stat, QuantileStatistic):
        return [
            name
            for value in stat.value_columns()
            for name in (value, f"{value}{LOW_SUFFIX}", f"{value}{HIGH_SUFFIX}")
        ]
    columns = [stat.name, f"{stat.name}{MOE95_SUFFIX}"]
    if isinstance(stat, MeanStatistic):
        columns += [f"{stat.name}{UNDEFINED_SUFFIX}", f"{stat.name}{UNINFORMATIVE_SUFFIX}"]
    return columns
