"""`randomized`: per cell, the unbiased count of each answer to a question whose answers were
randomized on the respondent's device (local DP, docs/local.md), with its 95% margin, and each
answer's share of the cell's respondents.

    statistics:
      - name: drug_use
        kind: randomized
        column: drug_use             # the column the reports arrive in
        wave: drug-use-2025-06       # the wave recorded in the ledger (`dprelease local wave`)
        domain: [never, once, monthly, weekly]
        epsilon: 1/4                 # ε of each respondent's answer, as the wave's
        mechanism: krr               # optional, as the wave's: krr, oue or olh

Everything here is the wave's public questionnaire: a release checks that the ledger recorded
the wave with exactly these parameters. Its ε was spent when the answers were given, so the
statistic spends nothing: a release of randomized answers is post-processing.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from dprelease.errors import SpecError
from dprelease.loss import exact_positive
from dprelease.spec._base import NAME_PATTERN
from dprelease.spec._statistic import PublishedAs, SpecParts, StatisticKind, StatisticModel
from dprelease.spec._values import MOE95_SUFFIX

__all__ = [
    "RESPONDENTS_SUFFIX",
    "SHARE_SUFFIX",
    "WAVE_ID_PATTERN",
    "RandomizedStatistic",
    "AnswerEpsilon",
    "Answers",
    "check_buckets",
]

#: A wave's id: its one spelling (lower case), so a wave is never recorded twice under two names.
WAVE_ID_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,99}$"
#: `<name>_respondents`: the reports per row; `<name>_<answer>_share`: an answer's share.
RESPONDENTS_SUFFIX = "_respondents"
SHARE_SUFFIX = "_share"
#: The most answers a question may have (OUE's reports hold one bit per answer).
MOST_ANSWERS = 1 << 16
#: A central release's privacy unit and contribution bounds, which a report (one row) has not.
UNIT_FIELDS = ("privacy_unit", "max_rows_per_unit", "max_groups_per_unit", "max_rows_per_group")


def answer_epsilon(value: Any) -> Fraction:
    """A question's ε, exact: the wave's spec and the release's statistic read it alike, so the
    release can refuse parameters that are not the recorded wave's."""
    try:
        return exact_positive(value)
    except ValueError as exc:
        raise ValueError(f"ε {exc}") from None


def checked_answers(values: list[Any]) -> list[Any]:
    """A question's public answers: 2 to 65,536 (what the randomizers take), none twice."""
    if not 2 <= len(values) <= MOST_ANSWERS:
        raise ValueError(f"a question needs 2 to {MOST_ANSWERS:,} answers")
    if len(set(values)) != len(values):
        raise ValueError("an answer is listed twice")
    return values


def check_buckets(g: int | None, mechanism: str | None) -> None:
    """`g` only with OLH, whose buckets it counts (SpecError naming `g`)."""
    if g is not None and mechanism != "olh":
        raise SpecError("g", "g is the number of OLH's buckets: set mechanism: olh or drop g")


#: A question's ε and its answers as a question declares them (a wave's spec, the randomized
#: statistic), each checked by the one function above, so the two read them alike.
AnswerEpsilon = Annotated[Fraction, BeforeValidator(answer_epsilon)]
Answers = Annotated[list[str] | list[int] | list[bool], AfterValidator(checked_answers)]


def answer_label(answer: str | int | bool) -> str:
    """An answer as its columns name it: text as it is, integers in digits, true/false."""
    if isinstance(answer, bool):
        return "true" if answer else "false"
    return str(answer)


class RandomizedStatistic(StatisticModel):
    """The answers to one question, randomized on each respondent's device by the wave's
    randomizer (k-RR, OUE or OLH at ε): per cell and answer the count de-biased from the
    reports ((C − n·q)/(p − q)), its exact variance's 95% margin, optionally projected onto
    nonnegative counts that sum to the cell's respondents, and each answer's share."""

    kind: Literal[StatisticKind.RANDOMIZED] = StatisticKind.RANDOMIZED
    column: str = Field(description="the column of randomized reports (the wave's question)")
    wave: Annotated[str, Field(pattern=WAVE_ID_PATTERN)] = Field(
        description="the wave's id, as recorded in the ledger (`dprelease local wave`)"
    )
    domain: Answers = Field(
        description="every answer the question allows, in order (public; the wave's)"
    )
    epsilon: AnswerEpsilon = Field(description="ε of each respondent's answer, exact (the wave's)")
    mechanism: Literal["krr", "oue", "olh"] | None = Field(
        default=None,
        description="the wave's krr, oue or olh; default: k-RR when k < 3e^ε + 2, else OUE "
        "(OLH if compact)",
    )
    compact: bool = Field(default=False, description="the wave's: prefer OLH to OUE")
    g: Annotated[int, Field(ge=2, lt=(1 << 31) - 1)] | None = Field(
        default=None, description="the wave's OLH buckets (default round(e^ε) + 1)"
    )
    hash_column: Annotated[str, Field(pattern=NAME_PATTERN)] = Field(
        default="wave_hash",
        description="the column each report's wave_hash arrives in (the page posts the "
        "configuration's with every report); a report under another configuration refuses "
        "the release",
    )
    public_columns: list[str] = Field(
        default_factory=list,
        description="the group-by columns, listed to state that they are public: the local "
        "mechanism protects only the answer, and each row's respondents are published exactly",
    )
    project: bool = Field(
        default=True,
        description="project each row's counts onto nonnegative counts that sum to its "
        "respondents (post-processing; the margins widen by the shift)",
    )
    shares: bool = Field(default=True, description="also publish each answer's share of the row")

    weighted: ClassVar[bool] = False
    randomized: ClassVar[bool] = True
    published_as: ClassVar[PublishedAs] = PublishedAs.TOTAL

    @model_validator(mode="after")
    def _buckets(self) -> RandomizedStatistic:
        check_buckets(self.g, self.mechanism)
        if self.hash_column == self.column:
            raise SpecError("hash_column", "the reports' wave_hash arrives in a column of its own")
        return self

    def labels(self) -> list[str]:
        return [answer_label(answer) for answer in self.domain]

    def value_columns(self) -> list[str]:
        """Each answer's count: `<name>_<answer>`."""
        return [f"{self.name}_{label}" for label in self.labels()]

    def share_columns(self) -> list[str]:
        """Each answer's share of the row's respondents (with `shares`)."""
        return [f"{column}{SHARE_SUFFIX}" for column in self.value_columns()] if self.shares else []

    def published_columns(self) -> list[tuple[str, PublishedAs]]:
        """Its counts (totals: a rounding base applies) and its shares (as a central share's:
        a ratio to the row's respondents in [0, 1]), each flagged by the rules."""
        counts = [(column, PublishedAs.TOTAL) for column in self.value_columns()]
        return counts + [(column, PublishedAs.MEAN) for column in self.share_columns()]

    def output_columns(self) -> list[str]:
        """The row's respondents, then per answer its count and margin, then (with `shares`)
        its share and margin."""
        counts = [c for column in self.value_columns() for c in (column, column + MOE95_SUFFIX)]
        shares = [c for column in self.share_columns() for c in (column, column + MOE95_SUFFIX)]
        return [f"{self.name}{RESPONDENTS_SUFFIX}", *counts, *shares]

    def read_fields(self) -> dict[str, str]:
        """The columns of reports it reads (compared as they are, never as numbers)."""
        return {self.column: "column", self.hash_column: "hash_column"}

    def check_weights(self, spec: SpecParts, index: int) -> None:
        """Refused with a survey weight: the estimator counts reports, each once."""
        if self.survey_weight is not None or spec.survey_weight is not None:
            raise SpecError(
                f"statistics[{index}].survey_weight" if self.survey_weight else "survey_weight",
                "randomized answers are counted once per report (the estimator is of "
                "respondents, not of a weighted population): remove survey_weight",
            )

    def check_split(self, spec: SpecParts, index: int, targeted: bool) -> None:
        """A release of randomized answers holds nothing else and protects each report (one
        row): what its scope keeps (`answer` neighbours, no privacy unit)."""
        central = next((s for s in spec.statistics if not s.randomized), None)
        if central is not None:
            raise SpecError(
                f"statistics[{index}]",
                f"a release of randomized answers spends nothing and its scope protects one "
                f"answer (who answered is public), so it cannot hold {central.name!r}, a "
                f"{central.kind.value} of confidential rows: release that in a spec of its own",
            )
        keys = spec.key_columns
        missing = [column for column in keys if column not in self.public_columns]
        if missing:
            raise SpecError(
                f"statistics[{index}].public_columns",
                f"group-by column {missing[0]!r} is not listed: the local mechanism protects only "
                "the randomized answer, so the group-by columns and each row's respondents are "
                f"published as they are; list {missing[0]!r} here if it is public (not "
                "sensitive), or do not group by it",
            )
        extra = [column for column in self.public_columns if column not in keys]
        if extra:
            raise SpecError(
                f"statistics[{index}].public_columns", f"{extra[0]!r} is not a group-by column"
            )
        for field in UNIT_FIELDS:  # the spec leaves them to this check (`_model`)
            if getattr(spec, field) is not None:
                raise SpecError(
                    field,
                    "each report is one respondent's (a row): a release of randomized answers "
                    "has no privacy unit or contribution bounds; remove it",
                )
        decimals = spec.postprocess.decimals
        if self.shares and decimals is not None and decimals < 0:
            raise SpecError(
                "postprocess.decimals",
                f"{decimals} would round the shares of {self.name!r} (in [0, 1]) to 0 or 1; its "
                "counts are integers whatever 'decimals' says: use decimals ≥ 0, or shares: false",
            )
        if spec.level_weights is not None:
            raise SpecError(
                "level_weights", "a release of randomized answers spends no ε to split: remove it"
            )
        if spec.neighbours is not None:
            raise SpecError(
                "neighbours",
                "a release of randomized answers protects one answer (its wave's terms); "
                "remove neighbours",
            )
