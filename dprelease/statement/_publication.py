"""What a release states about its publication post-processing: the reliability rules and how
many values each touched, the rounding base and what it guarantees, the sampling error beside
the noise, and the flag codes its table uses.

Everything here is post-processing of the noisy values with public inputs: the counts are
counts of noisy values (public), the rest follows from the spec.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from dprelease.files import ReadableErrors

#: The flag codes a release with rules uses, and where they come from.
FLAG_CODES = {
    "u": "low reliability (Eurostat observation status u; SDMX CL_OBS_STATUS U); where the "
    "value is blank it was suppressed for low reliability (Eurostat ': u'; SDMX Q, missing "
    "value; suppressed)",
}
#: Why a release suppresses, in the manifest's words.
NOT_PRIVACY = (
    "post-processing of the noisy values with public inputs: it spends no ε, and it is about "
    "reliability, never privacy (the noise protects every value, shown or suppressed; a "
    "suppressed cell found again from its margin is as unreliable as it was)"
)


class _Model(ReadableErrors):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RuleEntry(_Model):
    """One reliability rule and what it did to this release."""

    name: str
    test: str = Field(description="the test on each released value, in words")
    statistics: list[str] = Field(description="the statistics tested")
    action: Literal["flag", "suppress"]
    apply_to: Literal["value", "row"]
    rows: int = Field(
        description="rows (cells and margins) where the test held: a count of noisy values"
    )
    values: int = Field(description="values this rule flagged or suppressed")


class RoundingEntry(_Model):
    """The rounding to a base: which statistics, how, and what it may move."""

    base: int
    statistics: list[str]
    method: str
    additive: bool = Field(description="every released margin is the sum of its rounded cells")
    margin_of_error: str = Field(description="what the `_moe95` columns add for the rounding")


class SamplingEntry(_Model):
    """One statistic's sampling error beside the noise, and its combined margin of error."""

    statistic: str
    column: str = Field(description="the combined margin's column")
    inputs: str = Field(description="the public inputs it rests on")
    recipe: str = Field(description="how its standard error and the combined margin follow")


class PublicationEntry(_Model):
    """Post-processing for publication (no ε): sampling margins, rounding, reliability rules,
    applied in that order to the released table."""

    note: str = NOT_PRIVACY
    flags: dict[str, str] = Field(description="the codes of the `_flag` columns")
    sampling: list[SamplingEntry]
    rounding: RoundingEntry | None
    rules: list[RuleEntry]


class PlannedTest(_Model):
    """What one reliability rule's test does to one value column, as planned from the noise's
    margins alone (no data): where it holds, and from what truth it rarely does."""

    rule: str
    action: Literal["flag", "suppress"]
    apply_to: Literal["value", "row"]
    released_below: float | None = Field(
        description="the test holds where the released value (relative_margin_above: its "
        "|value|) is below this (None: it depends on each cell's own margin)"
    )
    truth_from: float | None = Field(
        description="a cell whose true value is at least this passes the test with probability "
        "≥ 97.5%: its released value falls below released_below only where the noise passes "
        "its 95% margin (None: per cell)"
    )


class PlannedValue(_Model):
    """What the rounding base and the reliability rules do to one released value column."""

    statistic: str
    column: str
    moe95: float | None = Field(
        description="the noise's 95% margin (with margins: the largest over the released "
        "rows; None: per cell, a combined or a quantile's interval)"
    )
    moe95_rounded: float | None = Field(
        description="with round_to: the most its `_moe95` becomes, the margin plus what the "
        "rounding may move (base − 1 for a count of rows, less than the base otherwise)"
    )
    tests: list[PlannedTest]


class PublicationPlan(_Model):
    """What publication will do to the release's values, from the spec and the noise alone."""

    note: str = NOT_PRIVACY
    round_to: int | None
    values: list[PlannedValue] = Field(description="each value column rounded or tested")
