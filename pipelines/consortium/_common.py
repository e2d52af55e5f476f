"""What both consortium code locations share: settings read from the environment, and the
periods of a spec as Dagster partitions."""

from __future__ import annotations

import os

import dagster as dg

from dprelease.consortium import ConsortiumError
from dprelease.spec import ResolvedSpec

START_ENV = "DPRELEASE_CONSORTIUM_START"


def required(name: str) -> str:
    """An environment variable the code location needs; one line naming it when missing."""
    value = os.environ.get(name)
    if not value:
        raise ConsortiumError(name, "is not set; the consortium code location needs it")
    return value


def partitions(resolved: ResolvedSpec) -> dg.MonthlyPartitionsDefinition | None:
    """Monthly partitions for a spec with a period (from $DPRELEASE_CONSORTIUM_START, YYYY-MM,
    default 2024-01), none for a spec without."""
    if resolved.spec.period is None:
        return None
    start = os.environ.get(START_ENV, "2024-01")
    return dg.MonthlyPartitionsDefinition(start_date=f"{start}-01")


def period_of(key: str | None) -> str | None:
    """The release period of a partition key ("2025-03-01" → "2025-03"); None unpartitioned."""
    return None if key is None else key[:7]


def partition_of(period: str) -> str | None:
    """The partition key of a period in a share's file name ("-": unpartitioned)."""
    return None if period == "-" else f"{period}-01"
