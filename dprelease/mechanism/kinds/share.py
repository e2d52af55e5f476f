"""`share`: the proportion per cell of rows whose column holds one of public categories (the share
of the insured), with its 95% margin.

A share is the mean of an indicator: the noisy count of rows in its categories (each row adds 1
if its value is one of them, else 0: a sum of values in [0, 1], so its sensitivity is a count's)
divided by the noisy count of the cell, clamped to [0, 1] (post-processing). With a survey
weight both are sums of weights. It reuses the release's count weighted as it is (at no cost)
and measures the rows in its categories from its own share of the loss; its margin is the
first-order propagation of both margins through the division, per cell (`mean.Ratio`), and it
is null (and flagged) where the noisy count is ≤ 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

import polars as pl
from pydantic import Field

from dprelease.loss import PrivacyLoss
from dprelease.mechanism.engines import InCategories, Number
from dprelease.mechanism.kinds._kind import Context, Kind
from dprelease.mechanism.kinds._measurement import Measurement
from dprelease.mechanism.kinds._stated import (
    MeasurementEntry,
    ReleasedEntry,
    SurveyWeightEntry,
    spent,
    weight_entry,
)
from dprelease.mechanism.kinds.mean import Ratio, RatioAccuracy, parts, ratio_columns
from dprelease.mechanism.margins import MarginAccuracy, Measured, Outcome
from dprelease.spec import (
    MOE95_SUFFIX,
    UNDEFINED_SUFFIX,
    UNINFORMATIVE_SUFFIX,
    PostProcessing,
    RowValue,
    ShareStatistic,
    StatisticKind,
)


class ShareEntry(RatioAccuracy, ReleasedEntry):
    """A share: rows (or weights) in the categories / rows (or weights) of the cell."""

    kind: Literal["share"]
    column: str
    categories: list[str] | list[float]
    how: str
    reuses: list[str] = Field(description="statistics whose noisy values it divides, at no ε")
    margin_of_error: str
    undefined: str
    uninformative: str
    measurements: list[MeasurementEntry] = Field(description="what it measures itself")
    survey_weight: SurveyWeightEntry | None = Field(
        default=None, description="weighted: Σ w·1[x in categories] / Σ w (None: unweighted)"
    )


@dataclass(frozen=True, kw_only=True)
class InCategoriesMeasurement(Measurement):
    """The rows of a cell whose column holds one of the categories: a sum of 0s and 1s (of
    weights, when weighted), measured as any sum of values in [0, 1] is."""

    categories: tuple[str | float, ...]

    def value_factors(self, reads: list[str]) -> list[Number | InCategories]:
        return [InCategories(self.column or "", self.categories)]

    def read_columns(self) -> list[str]:
        """Only the weight is read as a number (the column is compared, `InCategories`)."""
        return [] if self.survey_weight is None else [self.survey_weight.column]


@dataclass(frozen=True)
class ShareAllocation(Ratio):
    statistic: ShareStatistic

    def columns(
        self, released: Mapping[str, Measured], selected: Any, post: PostProcessing
    ) -> list[pl.Series]:
        total, count = released[self.measurement.name], released[self.count.name]
        return ratio_columns(self.statistic.name, 0.0, 1.0, total, count, post)

    def entry(
        self, post: PostProcessing, margins: MarginAccuracy | None, outcome: Outcome | None
    ) -> ShareEntry:
        stat, m = self.statistic, self.measurement
        rows = "weights" if m.survey_weight else "rows"
        reused = " and ".join(repr(name) for name in self.reused)
        return ShareEntry(
            name=stat.name,
            kind="share",
            **spent(self.loss),
            mechanism=m.family.text(self.loss.measure),
            column=stat.column,
            categories=stat.categories,
            how=f"noisy sum of the {rows} whose {stat.column!r} is one of the categories / noisy "
            f"sum of the {rows} of the cell (post-processing), clamped to [0, 1]; each row adds "
            "1 if its value is one of the categories, else 0 (a null, or any other value), so "
            "the numerator is a sum of values in [0, 1]; "
            + (
                f"reuses {reused} at no extra {self.loss.measure.symbol}"
                if self.reused
                else "with a count of its own"
            ),
            reuses=list(self.reused),
            margin_of_error=f"per cell in {stat.name}{MOE95_SUFFIX}: first-order propagation of "
            "the numerator's and the count's margins",
            undefined=f"null where the noisy count is ≤ 0 (no share is defined there); "
            f"{stat.name}{UNDEFINED_SUFFIX} is true in those cells",
            uninformative="the truth lies in [0, 1], so the share is rounded within it and its "
            "margin of error is at most the distance to the farther bound; where the margin "
            f"reaches that far {stat.name}{UNINFORMATIVE_SUFFIX} is true (null where undefined)",
            measurements=self._own_entries(margins, outcome),
            survey_weight=weight_entry(m),
        )


class Share(Kind):
    names = (StatisticKind.SHARE.value,)
    model = ShareStatistic
    entry = ShareEntry

    def no_target(self, stat: ShareStatistic) -> str:
        return (
            f"{stat.name!r} is a share: its margin depends on each cell's count; target the "
            "count it divides by"
        )

    def allocate(
        self,
        stat: ShareStatistic,
        share: PrivacyLoss,
        ctx: Context,
        owned: Mapping[str, Measurement],
        path: str,
    ) -> ShareAllocation:
        spec = ctx.resolved.spec
        weight = spec.survey_weight_of(stat)
        # an unweighted indicator counts rows: integer units (granularity 1), as a count has
        inside = RowValue(stat.column, 0.0, 1.0, weight, None if weight else 1.0)
        wanted = (
            (None, inside, StatisticKind.SUM),
            (stat.reuse(spec), RowValue.count(weight), StatisticKind.COUNT),
        )
        (total, count), reused = parts(stat.kind.value, stat.name, wanted, share, ctx, owned, path)
        measured = {f.name: getattr(total, f.name) for f in fields(total)}
        indicator = InCategoriesMeasurement(**measured, categories=tuple(stat.categories))
        return ShareAllocation(stat, share, indicator, count, reused)
