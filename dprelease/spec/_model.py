"""The release spec: one published table's public half, validated before anything touches data.

A spec names the group-by columns with their public key domains, the statistics with their
declared bounds, and the contribution bounds per privacy unit. Everything the sensitivity and the
manifest say comes from here, never from the data.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BeforeValidator, Field, field_validator, model_validator

from dprelease.change import ProtectedChange, UnitBounds, central_change
from dprelease.errors import SpecError
from dprelease.loss import Mechanism
from dprelease.period import Period
from dprelease.spec._base import NAME_PATTERN, RENAMED, Positive, Strict
from dprelease.spec._domains import GroupBy, check_selected_margins
from dprelease.spec._kinds import Statistic, output_columns
from dprelease.spec._publication import PostProcessing, SamplingInput, check_publication
from dprelease.spec._statistics import MeanReuse, MeanStatistic, StatisticModel
from dprelease.spec._values import (
    LEVEL_COLUMN,
    MOE95_SUFFIX,
    UNDEFINED_SUFFIX,
    UNINFORMATIVE_SUFFIX,
    SurveyWeight,
)


class PeriodSpec(Strict):
    """How a release is cut into reporting periods (one release per period)."""

    column: str
    every: Literal["month"] = "month"
    composition: Literal["sequential", "parallel"] = Field(
        default="sequential",
        description="sequential: the same people recur across periods, periods share one budget; "
        "parallel: periods hold disjoint people, each period gets the full budget",
    )


def period_of(period_spec: PeriodSpec | None, period: str | None) -> Period | None:
    """The period a release covers; SpecError unless the period and the spec agree.

    A spec with `period:` needs one, and its rows are always filtered to it. A spec without
    `period:` refuses one: its release covers every row, so a made-up period would only let the
    same rows be released (and charged) again under another name.
    """
    if period_spec is None:
        if period is not None:
            raise SpecError(
                "period",
                "this spec has no 'period:' section, so its release covers every row; "
                "leave the period out (or add 'period:' to the spec)",
            )
        return None
    if period is None:
        raise SpecError("period", "this spec is released per period: give a period (YYYY-MM)")
    return Period.parse(period)


class ReleaseSpec(Strict):
    """One published table: the fields of the YAML's `release:` section.

    Build it from YAML (`ReleaseSpec.from_yaml`) or in Python with the same fields; a keys file
    of a `file:` domain is read relative to the YAML file (or the working directory).
    """

    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    source: str
    privacy_unit: str | None = None
    max_rows_per_unit: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="R: rows kept per unit; required with a privacy unit unless both "
        "max_groups_per_unit and max_rows_per_group are set (then R defaults to their product)",
    )
    max_groups_per_unit: Annotated[int, Field(ge=1)] | None = None
    max_rows_per_group: Annotated[int, Field(ge=1)] | None = None
    neighbours: Annotated[ProtectedChange, BeforeValidator(central_change)] | None = None
    mechanism: Mechanism | None = Field(
        default=None,
        description="laplace (ε-DP) or gaussian (ρ-zCDP; needs a zcdp scope); default: what "
        "the scope's measure suggests (laplace for pure, gaussian for zcdp)",
    )
    group_by: list[GroupBy] = Field(default_factory=list)
    margins: list[list[str]] | None = Field(
        default=None,
        description="margins of the group-by released with the cells, each a list of group-by "
        "columns ([] is the grand total); every level is measured and the released table is "
        "made consistent: each margin is the sum of its released cells",
    )
    level_weights: list[Positive] | None = Field(
        default=None,
        description="how each statistic's ε is split over the levels, in proportion: the cells "
        "first, then each margin in order (default: equal)",
    )
    survey_weight: SurveyWeight | None = Field(
        default=None,
        description="weight every statistic (counts, sums, means, shares, ratios, quantiles) "
        "by this survey weight column (a statistic's own survey_weight wins)",
    )
    statistics: Annotated[list[Statistic], Field(min_length=1)]
    sampling: dict[str, SamplingInput] | None = Field(
        default=None,
        description="per statistic, the survey's sampling error from public inputs: a combined "
        "margin of error `<statistic>_moe95_combined` beside the noise's",
    )
    period: PeriodSpec | None = None
    postprocess: PostProcessing = PostProcessing()
    engine: Literal["polars", "spark"] | None = Field(
        default=None,
        description="where the exact aggregation runs (default polars); every engine computes "
        "the same release, so it is not part of the spec hash",
    )

    @classmethod
    def from_yaml(cls, path: str | Path) -> ReleaseSpec:
        """The spec in a YAML file's `release:` section; SpecError naming the YAML path."""
        from dprelease.spec._loading import load_spec

        return load_spec(path).spec

    def to_yaml(self) -> str:
        """The spec as YAML (`release:` section), as `from_yaml` and the pipeline read it."""
        data = self.model_dump(mode="json", exclude_none=True)
        _drop_unset_options(data)
        return yaml.safe_dump({"release": data}, sort_keys=False)

    @field_validator("margins")
    @classmethod
    def _no_margins_is_none(cls, margins: list[list[str]] | None) -> list[list[str]] | None:
        """`margins: []` means no margins, and is the same spec (and hash) as leaving it out."""
        return margins or None

    @model_validator(mode="after")
    def _consistent(self) -> ReleaseSpec:
        self._check_contribution_bounds()
        names = [s.name for s in self.statistics]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate statistic names {dupes}")
        columns = self.key_columns
        if len(set(columns)) != len(columns):
            raise ValueError("a group-by column is listed twice")
        self._check_margins()
        check_selected_margins(self.group_by, self.margins)
        self._check_weights()
        outputs = (
            ([LEVEL_COLUMN] if self.margins else [])
            + columns
            + [name for s in self.statistics for name in output_columns(s)]
        )
        clash = sorted({n for n in outputs if outputs.count(n) > 1})
        if clash:
            raise ValueError(
                f"output column names {clash} would repeat: statistic names, group-by columns "
                f"and the generated '<statistic>{MOE95_SUFFIX}' (and a mean's "
                f"'<statistic>{UNDEFINED_SUFFIX}' and '<statistic>{UNINFORMATIVE_SUFFIX}', and "
                f"with margins '{LEVEL_COLUMN}') columns "
                "must all differ; rename the statistic"
            )
        self._check_split()
        check_publication(self)
        return self

    def _check_weights(self) -> None:
        """A survey weight that would apply to a statistic whose kind cannot be weighted is
        refused, never silently ignored."""
        for index, stat in enumerate(self.statistics):
            stat.check_weights(self, index)

    def _check_margins(self) -> None:
        """Margins are distinct proper subsets of the group-by columns, and form at most two
        nested chains: then an integer rounding that keeps every margin the sum of its cells
        always exists (see `mechanism.margins`, its controlled rounding)."""
        if self.margins is None:
            if self.level_weights is not None:
                raise SpecError("level_weights", "level_weights split ε over margins: add them")
            return
        keys = self.key_columns
        if not keys:
            raise SpecError(
                "margins", "margins need group_by (an ungrouped release is its own grand total)"
            )
        refusal = next(filter(None, (s.refuse_margins() for s in self.statistics)), None)
        if refusal is not None:
            raise SpecError("margins", refusal)
        sets: list[frozenset[str]] = []
        for index, margin in enumerate(self.margins):
            unknown = [column for column in margin if column not in keys]
            if unknown:
                raise SpecError(
                    f"margins[{index}]",
                    f"{unknown[0]!r} is not a group-by column ({', '.join(keys)})",
                )
            if len(set(margin)) != len(margin):
                raise SpecError(f"margins[{index}]", "a column is listed twice")
            if set(margin) == set(keys):
                raise SpecError(
                    f"margins[{index}]",
                    "these are all the group-by columns: the cells are always released; list "
                    "only coarser margins",
                )
            if frozenset(margin) in sets:
                raise SpecError(f"margins[{index}]", "this margin is listed twice")
            sets.append(frozenset(margin))
        for a, b, c in itertools.combinations(range(len(sets)), 3):
            if all(
                not (sets[i] <= sets[j] or sets[j] <= sets[i]) for i, j in ((a, b), (a, c), (b, c))
            ):
                raise SpecError(
                    "margins",
                    f"margins {self.margins[a]}, {self.margins[b]} and {self.margins[c]} cross "
                    "(none holds another's columns): integer counts that keep every margin the "
                    "sum of its cells are guaranteed only for at most two nested chains of "
                    "margins; drop one or nest them",
                )
        levels = len(self.margins) + 1
        if self.level_weights is not None and len(self.level_weights) != levels:
            raise SpecError(
                "level_weights",
                f"give one weight per level: {levels} (the cells, then each margin in order)",
            )

    def _check_split(self) -> None:
        """Accuracy targets split ε only if every statistic that spends has one; a kind that
        cannot target a margin says whether it can take part (`check_split`)."""
        targeted = [s.target() is not None for s in self.statistics if s.targetable()]
        if any(targeted) and not all(targeted):
            raise ValueError(
                "either every count and sum has 'target_moe95' (accuracy-first split) "
                "or none has (split by weights)"
            )
        for index, stat in enumerate(self.statistics):
            stat.check_split(self, index, any(targeted))

    def _check_contribution_bounds(self) -> None:
        """Bounds say what they do: only those the engine enforces may be set, R is explicit
        unless it is the product G × R_g, and never larger than that product."""
        groups, per_group = self.max_groups_per_unit, self.max_rows_per_group
        if self.of_randomized_answers:  # one row each: its statistic refuses any unit or bound
            return
        if self.privacy_unit is None:
            if self.max_rows_per_unit or groups or per_group:
                raise SpecError(
                    "privacy_unit",
                    "contribution bounds need 'privacy_unit' (without it each row is a unit "
                    "and contributes one row); remove the bounds or name the unit column",
                )
            return
        if not self.group_by and (groups or per_group):
            raise SpecError(
                "max_groups_per_unit" if groups else "max_rows_per_group",
                "max_groups_per_unit and max_rows_per_group bound groups, and this release has "
                "no group_by; remove them and set max_rows_per_unit",
            )
        if self.max_rows_per_unit is None and not (groups and per_group):
            raise SpecError(
                "max_rows_per_unit",
                "set max_rows_per_unit (the rows one unit may contribute), or both "
                "max_groups_per_unit and max_rows_per_group (it then defaults to their product)",
            )
        if groups and per_group and (self.max_rows_per_unit or 0) > groups * per_group:
            raise SpecError(
                "max_rows_per_unit",
                f"max_rows_per_unit ({self.max_rows_per_unit}) exceeds max_groups_per_unit × "
                f"max_rows_per_group = {groups * per_group}, which no unit can exceed; lower it "
                "or leave it out (it defaults to that product)",
            )

    @property
    def of_randomized_answers(self) -> bool:
        """Whether it releases answers randomized on the respondents' devices (local DP; then
        it holds nothing else): it spends nothing, in the scope its waves were charged to."""
        return any(stat.randomized for stat in self.statistics)

    def survey_weight_of(self, stat: StatisticModel) -> SurveyWeight | None:
        """The survey weight a statistic is weighted by: its own, else the release's (None:
        every row counts once, and always for a kind that is never weighted)."""
        if not stat.weighted:
            return None
        return stat.survey_weight or self.survey_weight

    def reuse_of(self, mean: MeanStatistic) -> MeanReuse:
        """What a mean divides (see `MeanStatistic.reuse`)."""
        return mean.reuse(self)

    @property
    def rows_per_unit(self) -> int:
        """R, the rows one unit keeps after bounding: declared, else G × R_g; 1 without a unit."""
        if self.max_rows_per_unit is not None:
            return self.max_rows_per_unit
        if self.max_groups_per_unit and self.max_rows_per_group:
            return self.max_groups_per_unit * self.max_rows_per_group
        return 1

    @property
    def unit_bounds(self) -> UnitBounds:
        """What one privacy unit may contribute, as the engines enforce it (R, G, R_g): every
        sensitivity starts from it (`change.reach`)."""
        return UnitBounds(
            rows=self.rows_per_unit,
            groups=self.max_groups_per_unit,
            rows_per_group=self.max_rows_per_group,
            unit=self.privacy_unit is not None,
            declared=self.privacy_unit is None or self.max_rows_per_unit is not None,
        )

    @property
    def key_columns(self) -> list[str]:
        """All group-by columns, in declared order: the key columns of the released table."""
        return [column for group in self.group_by for column in group.key_columns]

    def missing_rules(self) -> dict[str, frozenset[str]]:
        """Per column read as values, the rules its statistics apply to rows without a number
        there ("fill", "drop"; a survey weight's is "fill"), for the operator's warning."""
        rules: dict[str, set[str]] = {}
        for statistic in self.statistics:
            for column, rule in statistic.missing_rules().items():
                rules.setdefault(column, set()).add(rule)
        return {column: frozenset(found) for column, found in rules.items()}

    def canonical_json(self) -> str:
        """The spec as canonical JSON, for its hash (a released slot's identity in the ledger).

        The form is frozen at its first version: every statistic lists the fields all kinds
        had then, and renamed fields keep their first names, so a spec released before a
        refactor of this model is still the same spec. A field added later must enter only
        when it is set. The engine is left out: every engine computes the same release."""
        data = self.model_dump(mode="json", exclude={"engine"})
        for later in ("margins", "level_weights", "mechanism", "survey_weight", "sampling"):
            if data[later] is None:
                del data[later]
        _drop_unset_options(data)
        data["statistics"] = [_canonical(statistic) for statistic in data["statistics"]]
        data["postprocess"] = _canonical(data["postprocess"])
        for later in ("round_to", "rules"):
            if data["postprocess"][later] is None:
                del data["postprocess"][later]
        return json.dumps(data, sort_keys=True, separators=(",", ":"))


def _drop_unset_options(data: dict[str, Any]) -> None:
    """Leave out of a dumped spec the options that are off unless set (a keys file's
    `outside_spec_dir`, a selection's `rule`): a spec that does not use one reads and hashes as
    before it existed."""
    for group in data["group_by"]:
        if group["domain"].get("outside_spec_dir") is False:
            del group["domain"]["outside_spec_dir"]
        if "select" in group["domain"] and group["domain"].get("rule") is None:
            del group["domain"]["rule"]  # a selection's rule: auto unless set


_FIRST_NAMES = {new: old for old, new in RENAMED.items()}
_STATISTIC_FIELDS = ("column", "lower", "upper", "weight", "target_ci95", "granularity")


def _canonical(section: dict[str, Any]) -> dict[str, Any]:
    """A statistic or postprocess section under the canonical form's field names."""
    named = {_FIRST_NAMES.get(key, key): value for key, value in section.items()}
    for later in ("survey_weight", "weight_resolution"):  # later: only when set
        if later in named and named[later] is None:
            del named[later]
    if named.get("missing") == "fill":  # later: only when not the default nulls rule
        del named["missing"]
    if "kind" in named:
        named = dict.fromkeys(_STATISTIC_FIELDS) | named
    return named
