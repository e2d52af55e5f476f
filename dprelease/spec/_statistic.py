"""The contract of a statistic's spec model: its kind, what publication may do with its values,
the questions every kind's model answers (`StatisticModel`), and the parts of the release spec its
checks read (`SpecParts`: the spec is built on the statistics, so they name it by its shape).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, ClassVar, Protocol

from pydantic import Field

from dprelease.change import ProtectedChange
from dprelease.spec._base import NAME_PATTERN, Positive, Renamed
from dprelease.spec._values import MOE95_SUFFIX, RowValue, SurveyWeight


class StatisticKind(StrEnum):
    COUNT = "count"
    SUM = "sum"
    MEAN = "mean"
    QUANTILE = "quantile"
    SHARE = "share"
    MEDIAN = "median"  # a quantile at p = 1/2
    RATIO = "ratio"
    RANDOMIZED = "randomized"  # answers randomized on the respondent's device (local DP)


class PublishedAs(StrEnum):
    """What publication (`dprelease.publication`: rounding bases, reliability rules, the
    sampling error) may do with a kind's values, all of it post-processing."""

    TOTAL = "total"  # values that add up over cells: a rounding base applies
    MEAN = "mean"  # a ratio to the cell's count within known bounds: a mean's sampling error
    RATIO = "ratio"  # a ratio of two totals: a sampling error only as published per cell
    RANK = "rank"  # a value with a 95% interval in ranks: no margin, no sampling error


class _StatisticBase(Renamed):
    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    kind: StatisticKind  # each kind narrows it to its own (the union's tag)
    weight: Positive | None = Field(
        default=None, description="share of ε in proportion to the weights (default 1)"
    )
    survey_weight: SurveyWeight | None = Field(
        default=None,
        description="weight every row by this survey weight column (default: the release's "
        "survey_weight, if any)",
    )

    #: Whether a survey weight applies to it (its own, else the release's).
    weighted: ClassVar[bool] = True
    #: What its own measurement is, for a mean to reuse: "count", "sum", or None (none).
    provides: ClassVar[str | None] = None
    #: What publication may do with its values (`PublishedAs`).
    published_as: ClassVar[PublishedAs] = PublishedAs.TOTAL
    randomized: ClassVar[bool] = False  # answers randomized on the device: spends nothing

    def value_columns(self) -> list[str]:
        """Its released value columns (a quantile's one per p), each with its own flag."""
        return [self.name]

    def published_columns(self) -> list[tuple[str, PublishedAs]]:
        """Every value column publication treats (its flag, rules, rounding), and how."""
        return [(column, self.published_as) for column in self.value_columns()]

    def element_bounds(self) -> tuple[float, float] | None:
        """The bounds of each row's value, where it has some (a sampling variance rests on
        them: at most (ȳ − lower)(upper − ȳ))."""
        return None

    def value_range(self) -> tuple[float, float] | None:
        """The bounds its released value is clamped to, where it has some (a ratio's: a mean,
        a share, a ratio); decimals coarser than their width would show only a bound."""
        return None

    def target(self) -> float | None:
        """The 95% margin it targets (an accuracy-first split), if its kind can have one."""
        return None

    def targetable(self) -> bool:
        """Whether its kind can target a margin (`target_moe95`)."""
        return False

    def row_value(self, spec: SpecParts) -> RowValue | None:
        """What each kept row adds to its own measurement (None: a count of rows); only a kind
        that `provides` a measurement has one."""
        raise TypeError(f"a {self.kind.value} is not one measurement")

    def reads(self) -> list[str]:
        """The input columns it reads as values (each named by its `column` field)."""
        return []

    def missing_rules(self) -> dict[str, str]:
        """Per column it reads as values, what it makes of a row without a number there
        (`Missing`: "fill" unless it declares `missing`)."""
        return dict.fromkeys(self.reads(), getattr(self, "missing", "fill"))

    def read_fields(self) -> dict[str, str]:
        """Each column it reads as values, and the field that names it (for errors)."""
        return {column: "column" for column in self.reads()}

    def category_reads(self) -> dict[str, tuple[str | float, ...]]:
        """The input columns it compares with public categories (named by its `column`)."""
        return {}

    def output_columns(self) -> list[str]:
        """The released columns it makes: its values and its margin of error."""
        return [self.name, f"{self.name}{MOE95_SUFFIX}"]

    def refuse_margins(self) -> str | None:
        """Why a release with margins cannot hold it (None: it can)."""
        return None

    def check_weights(self, spec: SpecParts, index: int) -> None:
        """Refuse a survey weight that would apply to it but cannot (SpecError)."""

    def check_split(self, spec: SpecParts, index: int, targeted: bool) -> None:
        """Refuse it in the release's split of ε (`targeted`: accuracy-first) where it cannot
        take part, or a weight it cannot use (SpecError)."""


#: What every kind's spec model is (for code that treats statistics alike).
StatisticModel = _StatisticBase


class Decimals(Protocol):
    """What a statistic's checks read of the spec's post-processing: its decimal places."""

    @property
    def decimals(self) -> int | None: ...


class SpecParts(Protocol):
    """What a statistic's checks read of the release spec that holds it (`ReleaseSpec`)."""

    @property
    def statistics(self) -> Sequence[StatisticModel]: ...
    @property
    def key_columns(self) -> list[str]: ...
    @property
    def privacy_unit(self) -> str | None: ...
    @property
    def neighbours(self) -> ProtectedChange | None: ...
    @property
    def survey_weight(self) -> SurveyWeight | None: ...
    @property
    def level_weights(self) -> Sequence[float] | None: ...
    @property
    def postprocess(self) -> Decimals: ...
    def survey_weight_of(self, stat: StatisticModel) -> SurveyWeight | None: ...
