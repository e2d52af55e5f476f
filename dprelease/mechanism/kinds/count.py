"""`count`: the rows of each cell (a survey-weighted count: the sum of their weights).

One measurement over the key grid, spent from its share: Δ1 is the rows one unit's change
moves (`change.reach`; a weighted count: × W), Δ2 packs them into the fewest cells. A count of
rows is released as integers (clamped at 0 with `nonnegative`), a weighted count as a sum is
(rounded to the place its noise leaves). It can target a 95% margin, and a mean reuses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar, Literal

import polars as pl

from dprelease.errors import SpecError
from dprelease.loss import PrivacyLoss
from dprelease.mechanism.kinds._kind import Allocated, Context, Kind
from dprelease.mechanism.kinds._measurement import Measurement
from dprelease.mechanism.kinds._stated import (
    MeasuredEntry,
    ReleasedEntry,
    levels_accuracy,
    measured_fields,
    spent_by,
)
from dprelease.mechanism.margins import (
    MarginAccuracy,
    Measured,
    Outcome,
    count_columns,
    value_columns,
)
from dprelease.mechanism.noise import noise_family
from dprelease.mechanism.sensitivity import sensitivity_bound, sensitivity_squared_bound
from dprelease.spec import CountStatistic, PostProcessing, StatisticKind, SumStatistic


class OneMeasurementAccuracy:
    """What the planner reads from the entry of a statistic that is one measurement (a count,
    a sum): its Δ, scale and margin, each level's with margins, and its target checked."""

    def accuracy(
        self, by_name: Mapping[str, ReleasedEntry], targets: Mapping[str, float]
    ) -> dict[str, Any]:
        entry: Any = self  # a ReleasedEntry and MeasuredEntry with a target (see its users)
        target = targets.get(entry.name, entry.target_moe95)
        return {
            **spent_by(entry),
            "sensitivity": entry.sensitivity,
            "derivation": entry.derivation,
            "scale": entry.noise_scale,
            "moe95": entry.moe95,
            "target_moe95": target,
            "target_met": None if target is None else entry.moe95 <= target,
            "levels": levels_accuracy(entry.levels),
        }


class CountEntry(OneMeasurementAccuracy, ReleasedEntry, MeasuredEntry):
    kind: Literal["count"]
    target_moe95: float | None = None
    target_met: bool | None = None


@dataclass(frozen=True)
class OneMeasurement(Allocated):
    """A statistic that is one measurement of its own (a count, a sum)."""

    measurement: Measurement

    @property
    def vectors(self) -> tuple[Measurement, ...]:
        return (self.measurement,)

    def own(self) -> list[Measurement]:
        return [self.measurement]

    def published(self) -> list[str]:
        return [] if self.measurement.counts_rows else [self.measurement.name]

    def _stated(
        self, margins: MarginAccuracy | None, outcome: Outcome | None
    ) -> tuple[dict[str, Any], float | None, bool | None]:
        """Its measurement's fields, its target and whether the margin meets it."""
        measured = measured_fields(self.measurement, margins, outcome)
        target = getattr(self.statistic, "target_moe95", None)
        return measured, target, None if target is None else measured["moe95"] <= target

    def _mechanism(self) -> str:
        return self.measurement.family.text(self.loss.measure)


@dataclass(frozen=True)
class CountAllocation(OneMeasurement):
    statistic: CountStatistic

    def columns(
        self, released: Mapping[str, Measured], selected: Any, post: PostProcessing
    ) -> list[pl.Series]:
        """A count of rows as integers; a weighted count as a sum is (rounded to its place)."""
        got = released[self.measurement.name]
        if self.measurement.counts_rows:
            return count_columns(self.statistic.name, got, post)
        return value_columns(self.statistic.name, got, post)

    def entry(
        self, post: PostProcessing, margins: MarginAccuracy | None, outcome: Outcome | None
    ) -> CountEntry:
        measured, target, met = self._stated(margins, outcome)
        return CountEntry(
            **measured,
            name=self.statistic.name,
            kind="count",
            mechanism=self._mechanism(),
            target_moe95=target,
            target_met=met,
        )


def targeted_need(stat: CountStatistic | SumStatistic, ctx: Context) -> Fraction:
    """The loss a count's or sum's target margin needs: the noise family's inverse of its
    accuracy at Δ1 or Δ2² before discretization (`NoiseFamily.need`)."""
    target = stat.target()
    if target is None:  # the spec has targets on every count and sum, or on none
        raise SpecError(stat.name, "either every count and sum has 'target_moe95' or none has")
    return noise_family(ctx.mechanism).need(
        Fraction(target),
        lambda: sensitivity_bound(stat, ctx.resolved.spec, ctx.neighbours),
        lambda: sensitivity_squared_bound(stat, ctx.resolved, ctx.neighbours),
        ctx.measure,
    )


class OneMeasurementKind(Kind):
    """A kind whose statistic is one measurement of its own (a count, a sum): made first, so a
    mean may reuse it, and able to target a 95% margin."""

    part: ClassVar[StatisticKind]  # what its measurement is named: COUNT or SUM
    allocation: ClassVar[type[OneMeasurement]]

    def need(self, stat: Any, ctx: Context) -> Fraction:
        return targeted_need(stat, ctx)

    def owned(self, stat: Any, share: PrivacyLoss, ctx: Context, path: str) -> Measurement:
        value = stat.row_value(ctx.resolved.spec)
        return ctx.measuring.measure(stat.name, value, self.part, share, path)

    def allocate(
        self,
        stat: Any,
        share: PrivacyLoss,
        ctx: Context,
        owned: Mapping[str, Measurement],
        path: str,
    ) -> OneMeasurement:
        return self.allocation(stat, share, owned[stat.name])


class Count(OneMeasurementKind):
    names = (StatisticKind.COUNT.value,)
    model = CountStatistic
    entry = CountEntry
    part = StatisticKind.COUNT
    allocation = CountAllocation
