"""`ratio`: Σ w·y / Σ w·x per cell, clamped to the ratio's public [lower, upper], with its 95%
margin (post-processing of two noisy sums).

A ratio is a mean whose denominator is a sum of a second column instead of a count: its
numerator and its denominator are each a sum of a clamped column (weighted alike), reused from
the release's sums of the same column, bounds and weight at no cost, or measured from an equal
part of its own share (`RatioStatistic.reuse`). Each side's sensitivity is a sum's, from its
declared bounds; its margin is the first-order propagation of both sums' margins through the
division, per cell (`mean.Ratio`), and it is null (and flagged) where the noisy denominator is
≤ 0 (the denominator's column is ≥ 0, so only noise or an empty cell puts it there).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import polars as pl
from pydantic import Field

from dprelease.loss import PrivacyLoss
from dprelease.mechanism.kinds._kind import Context, Kind
from dprelease.mechanism.kinds._measurement import Measurement
from dprelease.mechanism.kinds._stated import (
    EntryModel,
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
    RatioStatistic,
    StatisticKind,
)

#: The internal names of the sums a ratio measures itself (`internal_name`'s part).
PARTS = ("numerator", "denominator")


class RatioSideEntry(EntryModel):
    """One side of a ratio as declared: its column and bounds."""

    column: str
    lower: float
    upper: float


class RatioEntry(RatioAccuracy, ReleasedEntry):
    """A ratio: the noisy sum of the numerator's column / the noisy sum of the denominator's."""

    kind: Literal["ratio"]
    numerator: RatioSideEntry
    denominator: RatioSideEntry
    lower: float
    upper: float
    how: str
    reuses: list[str] = Field(description="statistics whose noisy values it divides, at no ε")
    margin_of_error: str
    undefined: str
    uninformative: str
    measurements: list[MeasurementEntry] = Field(description="what it measures itself")
    survey_weight: SurveyWeightEntry | None = Field(
        default=None, description="weighted: Σ w·y / Σ w·x (None: every row counts once)"
    )

    numerator_part: ClassVar[str] = PARTS[0]


@dataclass(frozen=True)
class RatioAllocation(Ratio):
    statistic: RatioStatistic

    def columns(
        self, released: Mapping[str, Measured], selected: Any, post: PostProcessing
    ) -> list[pl.Series]:
        stat = self.statistic
        total, count = released[self.measurement.name], released[self.count.name]
        return ratio_columns(stat.name, stat.lower, stat.upper, total, count, post)

    def entry(
        self, post: PostProcessing, margins: MarginAccuracy | None, outcome: Outcome | None
    ) -> RatioEntry:
        stat, m = self.statistic, self.measurement
        sums = "noisy weighted sum" if m.survey_weight else "noisy sum"
        reused = " and ".join(repr(name) for name in self.reused)
        return RatioEntry(
            name=stat.name,
            kind="ratio",
            **spent(self.loss),
            mechanism=m.family.text(self.loss.measure),
            numerator=RatioSideEntry(**stat.numerator.model_dump(exclude={"granularity"})),
            denominator=RatioSideEntry(**stat.denominator.model_dump(exclude={"granularity"})),
            lower=stat.lower,
            upper=stat.upper,
            how=f"{sums} of {stat.numerator.column!r} / {sums} of {stat.denominator.column!r} "
            "(post-processing), each column clamped to its bounds, the ratio to [lower, upper]; "
            + (
                f"reuses {reused} at no extra {self.loss.measure.symbol}"
                if self.reused
                else "with sums of its own"
            ),
            reuses=list(self.reused),
            margin_of_error=f"per cell in {stat.name}{MOE95_SUFFIX}: first-order propagation of "
            "the numerator's and the denominator's margins, (moe_y + |ratio|·moe_x) / x",
            undefined=f"null where the noisy denominator is ≤ 0 (no ratio is defined there); "
            f"{stat.name}{UNDEFINED_SUFFIX} is true in those cells",
            uninformative=f"the ratio lies in [{stat.lower:.15g}, {stat.upper:.15g}], so it is "
            "rounded within it and its margin of error is at most the distance to the farther "
            f"bound; where the margin reaches that far {stat.name}{UNINFORMATIVE_SUFFIX} is true "
            "(null where undefined)",
            measurements=self._own_entries(margins, outcome),
            survey_weight=weight_entry(m),
        )


class RatioKind(Kind):
    names = (StatisticKind.RATIO.value,)
    model = RatioStatistic
    entry = RatioEntry

    def spends(self, stat: RatioStatistic, resolved: Any) -> bool:
        return stat.reuse(resolved.spec).spends

    def no_target(self, stat: RatioStatistic) -> str:
        return (
            f"{stat.name!r} is a ratio: its margin depends on each cell's denominator; target "
            "the sums it reuses"
        )

    def allocate(
        self,
        stat: RatioStatistic,
        share: PrivacyLoss,
        ctx: Context,
        owned: Mapping[str, Measurement],
        path: str,
    ) -> RatioAllocation:
        spec = ctx.resolved.spec
        reuse = stat.reuse(spec)
        numerator, denominator = stat.part_values(spec)
        wanted = (
            (reuse.numerator, numerator, StatisticKind.SUM),
            (reuse.denominator, denominator, StatisticKind.SUM),
        )
        (top, bottom), reused = parts(
            stat.kind.value, stat.name, wanted, share, ctx, owned, path, PARTS
        )
        return RatioAllocation(stat, share, top, bottom, reused)
