"""`sum`: the sum per cell of a column clamped to [lower, upper] (survey-weighted: of w·x).

One measurement over the key grid in integer units of a granularity (declared, else a power of
two 2^20 below the noise scale), spent from its share: Δ1 is the rows one unit's change moves
times the largest |value| a row adds (under substitution in an ungrouped release: R × the span
of the values). Released in the column's units, rounded to the place its noise leaves. It can
target a 95% margin, and a mean of the same column and bounds reuses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import polars as pl
from pydantic import Field

from dprelease.mechanism.kinds._stated import (
    MeasuredEntry,
    ReleasedEntry,
    missing_field,
    missing_text,
)
from dprelease.mechanism.kinds.count import (
    OneMeasurement,
    OneMeasurementAccuracy,
    OneMeasurementKind,
)
from dprelease.mechanism.margins import (
    MarginAccuracy,
    Measured,
    Outcome,
    published_decimals,
    value_columns,
)
from dprelease.spec import PostProcessing, StatisticKind, SumStatistic


class SumEntry(OneMeasurementAccuracy, ReleasedEntry, MeasuredEntry):
    kind: Literal["sum"]
    column: str
    lower: float
    upper: float
    decimals: int | None = Field(description="decimal places published (negative: tens, …)")
    target_moe95: float | None = None
    target_met: bool | None = None
    missing: str | None = missing_field()


@dataclass(frozen=True)
class SumAllocation(OneMeasurement):
    statistic: SumStatistic

    def columns(
        self, released: Mapping[str, Measured], selected: Any, post: PostProcessing
    ) -> list[pl.Series]:
        return value_columns(self.statistic.name, released[self.measurement.name], post)

    def entry(
        self, post: PostProcessing, margins: MarginAccuracy | None, outcome: Outcome | None
    ) -> SumEntry:
        measured, target, met = self._stated(margins, outcome)
        stat = self.statistic
        decimals = (
            published_decimals(self.measurement.moe95, post)
            if margins is None
            else margins.accuracy[self.measurement.name].places
        )
        return SumEntry(
            **measured,
            name=stat.name,
            kind="sum",
            mechanism=self._mechanism(),
            column=stat.column,
            lower=stat.lower,
            upper=stat.upper,
            decimals=decimals,
            target_moe95=target,
            target_met=met,
            missing=missing_text(stat.column, stat.missing),
        )


class Sum(OneMeasurementKind):
    names = (StatisticKind.SUM.value,)
    model = SumStatistic
    entry = SumEntry
    part = StatisticKind.SUM
    allocation = SumAllocation
