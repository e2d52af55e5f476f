"""Ratios of noisy totals that are kinds of their own: a share (the weights of a cell's rows in
public categories over the cell's) and a ratio (Σ w·y / Σ w·x). Each divides two measurements, its
own or another statistic's (`mechanism.kinds.mean.Ratio`), as a mean does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from dprelease.errors import SpecError
from dprelease.spec._base import Positive, Strict
from dprelease.spec._statistic import PublishedAs, SpecParts, StatisticKind, StatisticModel
from dprelease.spec._statistics import first_count
from dprelease.spec._values import (
    UNDEFINED_SUFFIX,
    UNINFORMATIVE_SUFFIX,
    RowValue,
    check_bounds,
)

__all__ = ["RatioPart", "RatioReuse", "RatioStatistic", "ShareStatistic"]


class ShareStatistic(StatisticModel):
    """The share per cell of rows whose `column` holds one of `categories` (the share of the
    insured: `column: insurance, categories: [private, public]`), in [0, 1] with its 95% margin:
    the noisy count of those rows / the noisy count of the cell (post-processing); with a survey
    weight, of their weights. It reuses the release's count weighted as it is, and measures the
    rows in its categories from its own share."""

    kind: Literal[StatisticKind.SHARE] = StatisticKind.SHARE

    published_as: ClassVar[PublishedAs] = PublishedAs.MEAN
    column: str
    categories: Annotated[list[str] | list[float], Field(min_length=1)] = Field(
        description="the public values counted: text, or numbers (1 and 1.0 are one number); "
        "a null or any other value counts as outside"
    )

    @model_validator(mode="before")
    @classmethod
    def _no_booleans(cls, data: Any) -> Any:
        if isinstance(data, dict) and any(isinstance(c, bool) for c in data.get("categories", [])):
            raise SpecError("categories", "give text or numbers, not true or false")
        return data

    @model_validator(mode="after")
    def _distinct(self) -> ShareStatistic:
        if any(isinstance(c, float) and not math.isfinite(c) for c in self.categories):
            raise SpecError("categories", "numbers must be finite")
        if len(set(self.categories)) != len(self.categories):
            raise SpecError("categories", "each category may appear once")
        return self

    def element_bounds(self) -> tuple[float, float] | None:
        return (0.0, 1.0)  # an indicator's

    def value_range(self) -> tuple[float, float] | None:
        return (0.0, 1.0)

    def category_reads(self) -> dict[str, tuple[str | float, ...]]:
        return {self.column: tuple(self.categories)}

    def output_columns(self) -> list[str]:
        """Its value and margin, and the flags of cells where it is undefined (a noisy count
        ≤ 0) and where its margin covers all of [0, 1]."""
        return _flagged_ratio_columns(self)

    def reuse(self, spec: SpecParts) -> str | None:
        """The count it divides by at no cost (None: it measures its own)."""
        return first_count(spec, self)

    def check_split(self, spec: SpecParts, index: int, targeted: bool) -> None:
        if targeted:
            raise SpecError(
                f"statistics[{index}]",
                "a share has no margin of its own to target (it depends on each cell's count) "
                "and measures its rows in the categories itself, so it cannot join an "
                "accuracy-first split: split by weights, or release it in a spec of its own",
            )


def _flagged_ratio_columns(stat: StatisticModel) -> list[str]:
    """A ratio's value and margin, then its undefined and uninformative flags."""
    return [
        stat.name,
        *StatisticModel.output_columns(stat)[1:],
        f"{stat.name}{UNDEFINED_SUFFIX}",
        f"{stat.name}{UNINFORMATIVE_SUFFIX}",
    ]


class RatioPart(Strict):
    """One side of a ratio: a column clamped to [lower, upper], the bounds its Δ rests on."""

    column: str
    lower: float
    upper: float
    granularity: Positive | None = Field(
        default=None,
        description="unit of discretization; default: a power of two 2^20 below the noise scale",
    )

    @model_validator(mode="after")
    def _bounds(self) -> RatioPart:
        check_bounds(self.lower, self.upper)
        return self


@dataclass(frozen=True)
class RatioReuse:
    """The sums a ratio divides at no cost: its numerator's and its denominator's (None: a
    measurement of its own, paid from its share)."""

    numerator: str | None
    denominator: str | None

    @property
    def spends(self) -> bool:
        return self.numerator is None or self.denominator is None


class RatioStatistic(StatisticModel):
    """Σ w·y / Σ w·x per cell (income per earner: `numerator: {column: income, …}`,
    `denominator: {column: earners, …}`), clamped to the ratio's public [lower, upper], with its
    95% margin: the noisy sum of the numerator's clamped column over the noisy sum of the
    denominator's (post-processing), weighted alike. It reuses sums of the same column, bounds
    and weight the release has, and measures what it cannot reuse from its own share."""

    kind: Literal[StatisticKind.RATIO] = StatisticKind.RATIO
    numerator: RatioPart = Field(description="y: {column, lower, upper} (granularity optional)")
    denominator: RatioPart = Field(
        description="x: {column, lower, upper} (granularity optional), lower ≥ 0"
    )
    lower: float = Field(description="the least the ratio can be: it is clamped to [lower, upper]")
    upper: float = Field(description="the most the ratio can be")

    published_as: ClassVar[PublishedAs] = PublishedAs.RATIO

    @model_validator(mode="after")
    def _bounds(self) -> RatioStatistic:
        check_bounds(self.lower, self.upper)
        if self.denominator.lower < 0:
            raise SpecError(
                "denominator.lower",
                "a ratio's denominator sums values ≥ 0 (where its noisy sum is ≤ 0 no ratio is "
                "defined): shift or split the column",
            )
        return self

    def reads(self) -> list[str]:
        return list(dict.fromkeys((self.numerator.column, self.denominator.column)))

    def read_fields(self) -> dict[str, str]:
        sides = {self.denominator.column: "denominator.column"}
        return {self.numerator.column: "numerator.column", **sides}

    def value_range(self) -> tuple[float, float] | None:
        return (self.lower, self.upper)

    def output_columns(self) -> list[str]:
        """Its value and margin, and the flags of cells where it is undefined (a noisy
        denominator ≤ 0) and where its margin covers all of [lower, upper]."""
        return _flagged_ratio_columns(self)

    def part_values(self, spec: SpecParts) -> tuple[RowValue, RowValue]:
        """What each kept row adds to the numerator's sum and to the denominator's."""
        weight = spec.survey_weight_of(self)
        return tuple(  # type: ignore[return-value]
            RowValue(part.column, part.lower, part.upper, weight, part.granularity)
            for part in (self.numerator, self.denominator)
        )

    def reuse(self, spec: SpecParts) -> RatioReuse:
        """The release's first sum serving each side (same column, bounds and weight; and
        granularity, if the side declares one): dividing those costs nothing and keeps the
        published sums and the ratio consistent."""
        found = []
        for wanted in self.part_values(spec):
            found.append(
                next(
                    (
                        s.name
                        for s in spec.statistics
                        if s.provides == "sum" and (v := s.row_value(spec)) and v.serves(wanted)
                    ),
                    None,
                )
            )
        return RatioReuse(*found)

    def check_split(self, spec: SpecParts, index: int, targeted: bool) -> None:
        reuse = self.reuse(spec)
        if targeted and reuse.spends:
            raise SpecError(
                f"statistics[{index}]",
                "with accuracy targets a ratio must reuse a sum for its numerator and one for "
                "its denominator (it has no margin of its own to target): add them",
            )
        if not reuse.spends and self.weight is not None:
            raise SpecError(
                f"statistics[{index}].weight",
                f"this ratio reuses {reuse.numerator!r} and {reuse.denominator!r} and spends "
                "no ε of its own; remove 'weight'",
            )
