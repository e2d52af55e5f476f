"""Ratios of noisy totals that are kinds of their own: a share (the weights of a cell's rows in
public categories over the cell's) and a ratio (Σ w·y / Σ w·x). Each divides two measurements, its
own or another statistic's (`mechanism.kinds.mean.Ratio`), as a mean does.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from dprelease.errors import SpecError
from dprelease.spec._statistics import (
    PublishedAs,
    StatisticKind,
    StatisticModel,
    first_count,
)
from dprelease.spec._values import UNDEFINED_SUFFIX, UNINFORMATIVE_SUFFIX

if TYPE_CHECKING:
    from dprelease.spec._model import ReleaseSpec

__all__ = ["ShareStatistic"]


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

    def category_reads(self) -> dict[str, tuple[str | float, ...]]:
        return {self.column: tuple(self.categories)}

    def output_columns(self) -> list[str]:
        """Its value and margin, and the flags of cells where it is undefined (a noisy count
        ≤ 0) and where its margin covers all of [0, 1]."""
        return [
            *super().output_columns(),
            f"{self.name}{UNDEFINED_SUFFIX}",
            f"{self.name}{UNINFORMATIVE_SUFFIX}",
        ]

    def reuse(self, spec: ReleaseSpec) -> str | None:
        """The count it divides by at no cost (None: it measures its own)."""
        return first_count(spec, self)

    def check_split(self, spec: ReleaseSpec, index: int, targeted: bool) -> None:
        if targeted:
            raise SpecError(
                f"statistics[{index}]",
                "a share has no margin of its own to target (it depends on each cell's count) "
                "and measures its rows in the categories itself, so it cannot join an "
                "accuracy-first split: split by weights, or release it in a spec of its own",
            )
