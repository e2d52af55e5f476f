"""The `publish:` section of a spec file: which budget a release draws on, and when it runs.

It is part of the spec file, not of the release spec: it does not change what a release computes
(nor its hash), only how much of which scope's budget each release spends. Every interface reads
it the same way, so `dprelease plan`, `dprelease release`, `dp.release` and the pipeline agree on
the ε of a release.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from fractions import Fraction
from typing import Annotated, Literal

from pydantic import Field, field_validator

from dprelease.period import Period
from dprelease.spec._base import Strict

#: A table format a release's files may be written in (manifest.json is always written), and
#: those written when none is chosen.
TableFormat = Literal["parquet", "csv", "xlsx", "sdmx"]
TABLE_FORMATS: tuple[TableFormat, ...] = ("parquet", "csv", "xlsx", "sdmx")
DEFAULT_FORMATS: tuple[TableFormat, ...] = ("parquet", "csv")
#: The optional module each format's writer needs, and the extra that installs it.
FORMAT_MODULES = {"xlsx": ("openpyxl", "publication")}


def missing_writer(formats: Sequence[str]) -> str | None:
    """Why a chosen format cannot be written here (its optional writer is not installed), so
    a release asking for it is refused before it spends anything; None: every one can."""
    for name in formats:
        module, extra = FORMAT_MODULES.get(name, (None, None))
        if module is not None and importlib.util.find_spec(module) is None:
            return (
                f"{name} is written with {module}, which is not installed: "
                f"pip install 'dprelease[{extra}]', or choose another format"
            )
    return None


class PublishSpec(Strict):
    """`publish:`: the scope, the share of its cap one release spends, the periods released,
    and the formats its files are written in."""

    scope: Annotated[str, Field(min_length=1)]
    share: Fraction = Field(description="fraction of the scope's cap one release spends, e.g. 1/12")
    first_period: str | None = Field(default=None, description="YYYY-MM; monthly specs only")
    last_period: str | None = Field(default=None, description="YYYY-MM; open-ended if absent")
    formats: Annotated[list[TableFormat], Field(min_length=1)] | None = Field(
        default=None,
        description="the table's files: parquet, csv, xlsx (a workbook), sdmx (SDMX-CSV); "
        "default parquet and csv. Written from the ledger's copy: any run may add one",
    )

    @field_validator("formats")
    @classmethod
    def _once_each(cls, formats: list[str] | None) -> list[str] | None:
        if formats is not None and len(set(formats)) != len(formats):
            raise ValueError("list each format once")
        if formats is not None and (problem := missing_writer(formats)) is not None:
            raise ValueError(problem)
        return formats

    @field_validator("share", mode="before")
    @classmethod
    def _fraction(cls, value: object) -> Fraction:
        try:
            share = Fraction(str(value))
        except (ValueError, ZeroDivisionError):
            raise ValueError(f"share must be a fraction like 1/12 or 0.25, got {value!r}") from None
        if not 0 < share <= 1:
            raise ValueError(f"share must be in (0, 1], got {value!r}")
        return share

    @field_validator("first_period", "last_period")
    @classmethod
    def _month(cls, value: str | None) -> str | None:
        """A period in its one canonical spelling (`Period.parse`)."""
        return None if value is None else str(Period.parse(value, ""))

    @property
    def first(self) -> Period | None:
        return None if self.first_period is None else Period.parse(self.first_period)

    @property
    def last(self) -> Period | None:
        return None if self.last_period is None else Period.parse(self.last_period)
