"""`mean`: noisy sum / noisy count per cell, clamped to [lower, upper] (post-processing).

A mean reuses the release's first count and its first sum of the same column and bounds,
weighted as it is (`MeanStatistic.reuse`): dividing those costs nothing and keeps the published
sum, count and mean consistent. What it cannot reuse it measures from its own share (half each
when it needs both). Its margin is the first-order propagation of the sum's and the count's
through the division, per cell; it is null (and flagged) where the noisy count is ≤ 0.

The division of two measurements (`Ratio`) serves any kind that is a ratio of noisy totals
within known bounds (a share is the mean of an indicator).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar, Literal, cast

import numpy as np
import polars as pl
from pydantic import Field

from dprelease.loss import PrivacyLoss
from dprelease.mechanism.kinds._kind import Allocated, Context, Kind
from dprelease.mechanism.kinds._measurement import Measurement, internal_name
from dprelease.mechanism.kinds._stated import (
    MeasuredEntry,
    MeasurementEntry,
    ReleasedEntry,
    SurveyWeightEntry,
    levels_accuracy,
    measurement_entry,
    missing_field,
    missing_text,
    noise_of,
    spent,
    spent_by,
    weight_entry,
)
from dprelease.mechanism.margins import (
    MarginAccuracy,
    Measured,
    Outcome,
    places_of,
    round_to,
    within,
)
from dprelease.spec import (
    MOE95_SUFFIX,
    UNDEFINED_SUFFIX,
    UNINFORMATIVE_SUFFIX,
    MeanStatistic,
    PostProcessing,
    RowValue,
    StatisticKind,
)


class RatioAccuracy:
    """What the planner reads from a ratio's entry (a mean's, a share's, a ratio's): Δ and scale
    are its numerator's, its margin is per cell (None), and each measurement it makes itself is
    listed."""

    #: The internal part name of its own numerator (`internal_name`), if it measures one.
    numerator_part: ClassVar[str] = "sum"

    def accuracy(
        self, by_name: Mapping[str, ReleasedEntry], targets: Mapping[str, float]
    ) -> dict[str, Any]:
        return ratio_accuracy(self, by_name)


class MeanEntry(RatioAccuracy, ReleasedEntry):
    kind: Literal["mean"]
    column: str
    lower: float
    upper: float
    how: str
    reuses: list[str] = Field(description="statistics whose noisy values it divides, at no ε")
    margin_of_error: str
    undefined: str
    uninformative: str | None = Field(
        default=None,
        description="where its margin covers its whole [lower, upper] (None: stored by a "
        "version that did not say)",
    )
    measurements: list[MeasurementEntry] = Field(description="what it measures itself")
    survey_weight: SurveyWeightEntry | None = Field(
        default=None, description="weighted: Σ w·x / Σ w (None: every row counts once)"
    )
    missing: str | None = missing_field()


def ratio_accuracy(entry: Any, by_name: Mapping[str, ReleasedEntry]) -> dict[str, Any]:
    """The planner's row of a ratio (a mean, a share): Δ and scale are its numerator's, its
    margin is per cell (None), and each measurement it makes itself is listed."""
    own = [m for m in entry.measurements if m.name.endswith(f":{entry.numerator_part}")]
    # the numerator comes first in `reuses`: a statistic that is one measurement
    numerator = own[0] if own else cast(MeasuredEntry, by_name[entry.reuses[0]])
    return {
        **spent_by(entry),
        "sensitivity": numerator.sensitivity,
        "derivation": numerator.derivation,
        "scale": numerator.noise_scale,
        "moe95": None,
        "reuses": entry.reuses,
        "measurements": [
            {"kind": part.kind, **noise_of(part), "levels": levels_accuracy(part.levels)}
            for part in entry.measurements
        ],
    }


def ratio_columns(
    name: str,
    lower: float,
    upper: float,
    total: Measured,
    count: Measured,
    post: PostProcessing,
) -> list[pl.Series]:
    """total / count, clamped to [lower, upper]; null (and flagged) where the count is ≤ 0,
    since no ratio is defined there (the bounds' midpoint would only look like data). Rounded
    within the bounds, its margin at most the distance to the farther bound, and flagged
    uninformative where that is what the margin is (`margins._decimals`)."""
    counts = count.values.cast(pl.Float64).to_numpy()
    defined = counts > 0
    safe = np.where(defined, counts, 1.0)
    mean = np.clip(total.values.to_numpy() / safe, lower, upper)
    # first-order propagation of the sum's and the count's margins through sum / count
    moe = (total.moe95 + np.abs(mean) * count.moe95) / safe
    # no place coarser than the range's own: beyond the width, a margin says only "anywhere"
    places = places_of(post, np.minimum(moe, upper - lower))
    value = within(mean, places, lower, upper)
    # the farthest the truth can be from the published value: a sure bound on its error
    reach = np.maximum(value - lower, upper - value)
    reach = round_to(reach, places, up=True, decimal=True)
    margin = round_to(moe, places, up=True)
    uninformative = margin >= reach
    out = [pl.Series(name, np.where(defined, value, np.nan))]
    if post.moe95_columns:
        published = np.where(defined, np.minimum(margin, reach), np.nan)
        out.append(pl.Series(f"{name}{MOE95_SUFFIX}", published))
    out = [series.fill_nan(None) for series in out]
    return [
        *out,
        pl.Series(f"{name}{UNDEFINED_SUFFIX}", ~defined),
        pl.Series(f"{name}{UNINFORMATIVE_SUFFIX}", uninformative, dtype=pl.Boolean).scatter(
            np.flatnonzero(~defined), None
        ),
    ]


@dataclass(frozen=True)
class Ratio(Allocated):
    """A statistic that divides two measurements, each its own or another statistic's."""

    measurement: Measurement  # the numerator (a mean's sum)
    count: Measurement  # the denominator
    reused: tuple[str, ...] = ()  # names of the statistics whose measurements it reuses

    @property
    def vectors(self) -> tuple[Measurement, ...]:
        return (self.measurement, self.count)

    def own(self) -> list[Measurement]:
        return [m for m in self.vectors if m.name not in self.reused]

    def _own_entries(
        self, margins: MarginAccuracy | None, outcome: Outcome | None
    ) -> list[MeasurementEntry]:
        return [measurement_entry(m, margins, outcome) for m in self.own()]


@dataclass(frozen=True)
class MeanAllocation(Ratio):
    statistic: MeanStatistic

    def columns(
        self, released: Mapping[str, Measured], selected: Any, post: PostProcessing
    ) -> list[pl.Series]:
        stat = self.statistic
        total, count = released[self.measurement.name], released[self.count.name]
        return ratio_columns(stat.name, stat.lower, stat.upper, total, count, post)

    def entry(
        self, post: PostProcessing, margins: MarginAccuracy | None, outcome: Outcome | None
    ) -> MeanEntry:
        stat, m = self.statistic, self.measurement
        reused = " and ".join(repr(name) for name in self.reused)
        return MeanEntry(
            name=stat.name,
            kind="mean",
            **spent(self.loss),
            mechanism=m.family.text(self.loss.measure),
            column=stat.column,
            lower=stat.lower,
            upper=stat.upper,
            how=(
                "noisy weighted sum / noisy weighted count"
                if m.survey_weight
                else "noisy sum / noisy count"
            )
            + " (post-processing), clamped to [lower, upper]; "
            + (
                f"reuses {reused} at no extra {self.loss.measure.symbol}"
                if self.reused
                else "with a sum and a count of its own"
            ),
            reuses=list(self.reused),
            margin_of_error=f"per cell in {stat.name}{MOE95_SUFFIX}: first-order propagation of "
            "the sum's and the count's margins",
            undefined=f"null where the noisy count is ≤ 0 (no mean is defined there); "
            f"{stat.name}{UNDEFINED_SUFFIX} is true in those cells",
            uninformative=f"the truth lies in [{stat.lower:.15g}, {stat.upper:.15g}], so the "
            "mean is rounded within it and its margin of error is at most the distance to the "
            "farther bound (a sure bound); where the margin reaches that far the mean ± margin "
            "covers the whole range and says nothing beyond the bounds: "
            f"{stat.name}{UNINFORMATIVE_SUFFIX} is true in those cells (null where undefined)",
            measurements=self._own_entries(margins, outcome),
            survey_weight=weight_entry(m),
            missing=missing_text(stat.column, stat.missing),
        )


def parts(
    stat_kind: str,
    stat_name: str,
    wanted: tuple[tuple[str | None, RowValue | None, StatisticKind], ...],
    share: PrivacyLoss,
    ctx: Context,
    owned: Mapping[str, Measurement],
    path: str,
    names: tuple[str, ...] | None = None,
) -> tuple[list[Measurement], tuple[str, ...]]:
    """A ratio's measurements: each `wanted` part (the statistic it reuses, else None; what each
    row adds; what it is) reused, or measured from an equal part of `share` (its internal name
    from `names`, else from what it is)."""
    own = sum(1 for reused, _, _ in wanted if reused is None)
    part = share * Fraction(1, own or 1)
    named = names or tuple(kind.value for _, _, kind in wanted)
    made = [
        owned[reused]
        if reused is not None
        else ctx.measuring.measure(
            internal_name(stat_kind, stat_name, name), value, kind, part, path
        )
        for (reused, value, kind), name in zip(wanted, named, strict=True)
    ]
    return made, tuple(reused for reused, _, _ in wanted if reused is not None)


class Mean(Kind):
    names = (StatisticKind.MEAN.value,)
    model = MeanStatistic
    entry = MeanEntry

    def spends(self, stat: MeanStatistic, resolved: Any) -> bool:
        return stat.reuse(resolved.spec).spends

    def no_target(self, stat: MeanStatistic) -> str:
        return (
            f"{stat.name!r} is a mean: its margin depends on each cell's count; target the "
            "count and the sum it reuses"
        )

    def allocate(
        self,
        stat: MeanStatistic,
        share: PrivacyLoss,
        ctx: Context,
        owned: Mapping[str, Measurement],
        path: str,
    ) -> MeanAllocation:
        spec = ctx.resolved.spec
        reuse = stat.reuse(spec)
        count = stat.count_value(spec)
        wanted = (
            (reuse.sum, stat.value(spec), StatisticKind.SUM),
            (reuse.count, count, StatisticKind.COUNT),
        )
        (total, denominator), reused = parts(
            stat.kind.value, stat.name, wanted, share, ctx, owned, path
        )
        return MeanAllocation(stat, share, total, denominator, reused)
