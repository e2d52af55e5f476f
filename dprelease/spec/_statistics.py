"""Statistic kinds: what one released column computes, with the bounds its sensitivity rests on.

A new statistic kind starts here (its model and its output columns), then gets its sensitivity in
`mechanism` (accounting), its aggregate in both engines, its released columns in post-processing
and its manifest entry in `statement`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from dprelease.errors import SpecError
from dprelease.spec._base import NAME_PATTERN, Positive, Renamed


class StatisticKind(StrEnum):
    COUNT = "count"
    SUM = "sum"
    MEAN = "mean"


#: Suffix of the generated margin-of-error column of a statistic: the half-width of its 95%
#: interval (value ± margin).
MOE95_SUFFIX = "_moe95"
#: Suffix of a mean's flag column: true where the noisy count is ≤ 0 and the mean is null.
UNDEFINED_SUFFIX = "_undefined"
#: A mean's flag column: true where its margin covers its whole [lower, upper].
UNINFORMATIVE_SUFFIX = "_uninformative"
#: The column that names each row's level in a release with margins ("region,clinic", "total").
LEVEL_COLUMN = "level"
#: Largest |bound| a sum or mean may declare: beyond 2^53 a float no longer holds every integer,
#: and the noise scale and variance stated in the manifest could overflow.
MAX_ABS_BOUND = 2.0**53


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


#: One released column; `kind` says which (the YAML's `kind:` key).
Statistic = Annotated[CountStatistic | SumStatistic | MeanStatistic, Field(discriminator="kind")]
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
    the flags of cells where it is undefined and where it is uninformative."""
    columns = [stat.name, f"{stat.name}{MOE95_SUFFIX}"]
    if isinstance(stat, MeanStatistic):
        columns += [f"{stat.name}{UNDEFINED_SUFFIX}", f"{stat.name}{UNINFORMATIVE_SUFFIX}"]
    return columns
