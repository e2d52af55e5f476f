"""The `Statistic` union: one released column of any kind, its model picked by the YAML's `kind:`
(every kind's model is in `_statistics` or, for ratios of two totals, `_ratio`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from dprelease.spec._randomized import RandomizedStatistic
from dprelease.spec._ratio import RatioStatistic, ShareStatistic
from dprelease.spec._statistics import (
    CountStatistic,
    MeanStatistic,
    QuantileStatistic,
    StatisticKind,
    SumStatistic,
)

__all__ = ["STATISTIC_KINDS", "Statistic", "output_columns"]

#: One released column; `kind` says which (the YAML's `kind:` key).
Statistic = Annotated[
    CountStatistic
    | SumStatistic
    | MeanStatistic
    | QuantileStatistic
    | ShareStatistic
    | RatioStatistic
    | RandomizedStatistic,
    Field(discriminator="kind"),
]
STATISTIC_KINDS = tuple(kind.value for kind in StatisticKind)


def output_columns(stat: Statistic) -> list[str]:
    """The released columns a statistic makes (`output_columns` of its model)."""
    return stat.output_columns()
