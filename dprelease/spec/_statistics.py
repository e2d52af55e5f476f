"""Statistic kinds' spec models: what one released column computes, with the bounds its
sensitivity rests on, and the rules a spec checks about it. Each model says what a spec needs to
know of its kind without asking which kind it is: the columns it releases, whether a survey
weight applies, whether it may target a margin, what its own measurement measures (`provides`,
`row_value`: for a mean to reuse) and its own refusals (the questions are `_statistic`'s); the
rest of a kind is its module in `mechanism.kinds`.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from dprelease.errors import SpecError
from dprelease.spec._base import Positive
from dprelease.spec._statistic import PublishedAs, SpecParts, StatisticKind, StatisticModel
from dprelease.spec._values import (
    HIGH_SUFFIX,
    LOW_SUFFIX,
    MAX_WEIGHT_STEPS,
    UNDEFINED_SUFFIX,
    UNINFORMATIVE_SUFFIX,
    RowValue,
    check_bounds,
    check_quantile_levels,
    exact_decimal,
    grid_points,
    percent_text,
    weight_steps,
)

#: Every kind's spec model here and what is shared about them: what the spec's face exports, a
#: new kind's model with it.
__all__ = [
    "CountStatistic",
    "MeanReuse",
    "MeanStatistic",
    "QuantileStatistic",
    "SumStatistic",
    "first_count",
]


class CountStatistic(StatisticModel):
    """Rows per cell (after contribution bounding)."""

    kind: Literal[StatisticKind.COUNT] = StatisticKind.COUNT
    target_moe95: Positive | None = Field(
        default=None, description="wanted 95% margin of error: splits ε by accuracy targets"
    )

    provides: ClassVar[str | None] = "count"

    def target(self) -> float | None:
        return self.target_moe95

    def targetable(self) -> bool:
        return True

    def row_value(self, spec: SpecParts) -> RowValue | None:
        return RowValue.count(spec.survey_weight_of(self))


#: What a statistic makes of a row without a number in its column (null, NaN, unreadable):
#: "fill" counts it as 0, or as `lower` when 0 lies outside [lower, upper] (the nulls rule);
#: "drop" leaves it out (a sum adds nothing, a mean's count and a quantile's histogram skip it).
Missing = Literal["fill", "drop"]

_MISSING_DESCRIPTION = (
    "rows without a number in the column (null, NaN, unreadable): fill (count them as 0, or as "
    "lower when 0 is outside [lower, upper]) or drop (the statistic's rows are those with a "
    "value: a sum adds nothing for them, a mean's count and a quantile's histogram skip them)"
)


class _Bounded(StatisticModel):
    """A statistic of a column's values, which need declared bounds (they set Δ)."""

    column: str
    lower: float
    upper: float
    missing: Missing = Field(default="fill", description=_MISSING_DESCRIPTION)
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
        check_bounds(self.lower, self.upper)
        return self

    def reads(self) -> list[str]:
        return [self.column]

    def element_bounds(self) -> tuple[float, float] | None:
        return (self.lower, self.upper)

    def value(self, spec: SpecParts) -> RowValue:
        """What each kept row adds to a sum of its column (weighted as it is)."""
        weight = spec.survey_weight_of(self)
        drop = self.missing == "drop"
        return RowValue(self.column, self.lower, self.upper, weight, self.granularity, drop)

    def count_value(self, spec: SpecParts) -> RowValue | None:
        """What each kept row adds to the count it is divided by (a mean's): 1 (its weight),
        or with `missing: drop` 1 (its weight) only where its column has a value."""
        weight = spec.survey_weight_of(self)
        if self.missing == "drop":
            return RowValue.present(self.column, weight)
        return RowValue.count(weight)


class SumStatistic(_Bounded):
    """The sum per cell of a column clamped to [lower, upper]."""

    kind: Literal[StatisticKind.SUM] = StatisticKind.SUM
    target_moe95: Positive | None = Field(
        default=None, description="wanted 95% margin of error: splits ε by accuracy targets"
    )

    provides: ClassVar[str | None] = "sum"

    @model_validator(mode="after")
    def _one_split(self) -> SumStatistic:
        if self.weight is not None and self.target_moe95 is not None:
            raise ValueError("give either 'weight' or 'target_moe95', not both")
        return self

    def target(self) -> float | None:
        return self.target_moe95

    def targetable(self) -> bool:
        return True

    def row_value(self, spec: SpecParts) -> RowValue | None:
        return self.value(spec)


class MeanStatistic(_Bounded):
    """Noisy sum / noisy count per cell (post-processing). It reuses the release's count and a
    sum of the same column and bounds, and spends ε only on what it cannot reuse."""

    kind: Literal[StatisticKind.MEAN] = StatisticKind.MEAN

    published_as: ClassVar[PublishedAs] = PublishedAs.MEAN

    def value_range(self) -> tuple[float, float] | None:
        return (self.lower, self.upper)

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

    def output_columns(self) -> list[str]:
        """Its value and margin, and the flags of cells where it is undefined and where it is
        uninformative."""
        return [
            *super().output_columns(),
            f"{self.name}{UNDEFINED_SUFFIX}",
            f"{self.name}{UNINFORMATIVE_SUFFIX}",
        ]

    def reuse(self, spec: SpecParts) -> MeanReuse:
        """The release's first count, and its first sum of the mean's column and bounds (and
        granularity, if the mean declares one), each weighted as the mean is: dividing those
        costs no ε and keeps the published sum, count and mean consistent."""
        total = self.value(spec)
        return MeanReuse(
            # with missing: drop it divides by the rows with a value, which no count counts
            first_count(spec, self) if self.missing == "fill" else None,
            next(
                (
                    s.name
                    for s in spec.statistics
                    if s.provides == "sum" and _serves(s.row_value(spec), total)
                ),
                None,
            ),
        )

    def check_split(self, spec: SpecParts, index: int, targeted: bool) -> None:
        reuse = self.reuse(spec)
        if reuse.spends and targeted:
            raise SpecError(
                f"statistics[{index}]",
                "with accuracy targets a mean must reuse a count and a sum of its column "
                "and bounds (it has no margin of its own to target): add them",
            )
        if not reuse.spends and self.weight is not None:
            raise SpecError(
                f"statistics[{index}].weight",
                f"this mean reuses {reuse.count!r} and {reuse.sum!r} and spends no ε of its "
                "own; remove 'weight'",
            )


def first_count(spec: SpecParts, stat: StatisticModel) -> str | None:
    """The release's first count weighted as `stat` is: what a ratio divides by at no cost."""
    count = RowValue.count(spec.survey_weight_of(stat))
    return next(
        (s.name for s in spec.statistics if s.provides == "count" and s.row_value(spec) == count),
        None,
    )


def _serves(provided: RowValue | None, wanted: RowValue) -> bool:
    return provided is not None and provided.serves(wanted)


class QuantileStatistic(StatisticModel):
    """Quantiles per cell of a column clamped to [lower, upper] and rounded to a public grid of
    step `resolution`, each with a 95% interval; `median` is the quantile at p = 0.5. Exact
    permute-and-flip over the grid (`mechanism.quantiles`); its error is stated in ranks (under
    a survey weight: the weighted quantile, ranks in weight rounded to `weight_resolution`)."""

    kind: Literal[StatisticKind.QUANTILE, StatisticKind.MEDIAN]
    column: str
    lower: float
    upper: float
    resolution: Positive = Field(
        description="step of the public grid the values are rounded to; divides upper − lower"
    )
    missing: Missing = Field(default="fill", description=_MISSING_DESCRIPTION)
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
    weight_resolution: Positive | None = Field(
        default=None,
        description="weighted: the step each weight (clamped to [0, W]) is rounded to "
        "(default: the power of two with 2^16 ≤ W / step < 2^17); at most 2^20 steps in W",
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
        check_bounds(self.lower, self.upper)
        grid_points(self.lower_exact, self.upper_exact, self.resolution_exact)
        if self.interval_share is not None:
            share = exact_decimal(self.interval_share, "interval_share")
            if not 0 < share < 1:
                raise SpecError("interval_share", "must be strictly between 0 and 1")
        check_quantile_levels(self.ps, "p")
        return self

    published_as: ClassVar[PublishedAs] = PublishedAs.RANK

    def reads(self) -> list[str]:
        return [self.column]

    def output_columns(self) -> list[str]:
        """Each p's value, its interval and the flag of cells where that is the whole grid."""
        return [
            f"{value}{suffix}"
            for value in self.value_columns()
            for suffix in ("", LOW_SUFFIX, HIGH_SUFFIX, UNINFORMATIVE_SUFFIX)
        ]

    def refuse_margins(self) -> str | None:
        return (
            f"{self.name!r} is a {self.kind.value}: a quantile of a margin is not a sum of its "
            "cells' quantiles, so no consistent table holds both; release the margin's "
            "quantiles from a spec grouped by the margin's columns"
        )

    def check_weights(self, spec: SpecParts, index: int) -> None:
        """A weight resolution says something only of a weighted quantile, and must leave W
        1 to 2^20 steps (`weight_steps`: weight mass stays an exact, small integer)."""
        weight, path = spec.survey_weight_of(self), f"statistics[{index}].weight_resolution"
        if weight is None:
            if self.weight_resolution is not None:
                raise SpecError(path, f"{self.name!r} is not survey-weighted: remove it")
            return
        steps = weight_steps(weight, self.weight_resolution)[1]
        if not 1 <= steps <= MAX_WEIGHT_STEPS:
            raise SpecError(
                path, f"W = {weight.upper:g} is {steps} steps of it: leave 1 to 2^20 steps in W"
            )

    def check_split(self, spec: SpecParts, index: int, targeted: bool) -> None:
        if targeted:
            raise SpecError(
                f"statistics[{index}]",
                f"a {self.kind.value} has no margin of error to target (its error is in ranks, "
                "or weight if weighted), so it cannot join an accuracy-first split: split by "
                "weights (drop the targets; `dprelease plan --target` still finds their ε) or "
                "release it in a spec of its own",
            )

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
        return grid_points(self.lower_exact, self.upper_exact, self.resolution_exact)

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


@dataclass(frozen=True)
class MeanReuse:
    """What a mean divides: the names of the statistics it reuses (None: a measurement of its
    own, paid from its share)."""

    count: str | None
    sum: str | None

    @property
    def spends(self) -> bool:
        return self.count is None or self.sum is None
