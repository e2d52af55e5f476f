"""What a release does to its noisy values for its readers: reliability rules, a rounding base,
and the sampling error beside the noise (the spec's side; `dprelease.publication` applies them).

All of it is post-processing of the noisy values with public inputs, so it costs no ε and can
never weaken the guarantee. Reliability rules flag or suppress values whose margin of error is
large for their size, or whose count is small: that is about how far a reader may trust a noisy
number, never about privacy (the noise already protects every cell, suppressed or not).

    postprocess:
      round_to: 5                      # counts and sums to multiples of 5, margins kept additive
      rules:
        - {relative_margin_above: 0.3, action: flag}          # u: low reliability
        - {statistics: [people], value_below: 10, action: suppress, apply_to: row}
    sampling:
      income_mean: {design_effect: 1.8, respondents: people}
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Annotated, Literal, Protocol

import polars as pl
from pydantic import Field, model_validator

from dprelease.errors import SpecError
from dprelease.spec._base import NAME_PATTERN, Positive, Renamed, Strict
from dprelease.spec._domains import FileDomain, _read_keys_file
from dprelease.spec._kinds import Statistic, output_columns
from dprelease.spec._statistic import PublishedAs, SpecParts

#: Suffix of a released value's flag column (`<value column>_flag`), present with rules.
FLAG_SUFFIX = "_flag"
#: Suffix of a statistic's margin of error with the sampling error (`<statistic>_moe95_combined`).
COMBINED_SUFFIX = "_moe95_combined"
#: The flag of a value a rule judged of low reliability: Eurostat's observation status `u`
#: (SDMX CL_OBS_STATUS `U`). A suppressed value is blank with the same flag, as Eurostat shows
#: ": u" (not available, low reliability).
LOW_RELIABILITY = "u"
#: The most a rounding base may be: beyond it a base rounds away every number a table holds.
MAX_BASE = 10**9


class Rule(Strict):
    """One reliability rule: a test on each released value (and its margin), and what is done
    where it holds."""

    name: Annotated[str, Field(pattern=NAME_PATTERN)] | None = Field(
        default=None, description="its name in the manifest (default rule_1, rule_2, …)"
    )
    statistics: Annotated[list[str], Field(min_length=1)] | None = Field(
        default=None,
        description="the statistics tested (default: with value_below every count, with "
        "relative_margin_above every statistic with a margin of error)",
    )
    value_below: float | None = Field(
        default=None, description="the test holds where the released value is below this"
    )
    relative_margin_above: Positive | None = Field(
        default=None,
        description="the test holds where the 95% margin of error exceeds this fraction of "
        "|value| (0.3: the margin is more than 30% of the value)",
    )
    action: Literal["flag", "suppress"] = Field(
        description="flag: the value keeps its place with flag u (low reliability); suppress: "
        "the value and its margin are left blank, flagged u"
    )
    apply_to: Literal["value", "row"] = Field(
        default="value",
        description="value: the tested value only; row: every statistic of the row (a cell, "
        "or a margin's row) where the test holds",
    )

    @model_validator(mode="after")
    def _one_test(self) -> Rule:
        if (self.value_below is None) == (self.relative_margin_above is None):
            raise ValueError("give one test: value_below or relative_margin_above")
        if self.value_below is not None and not math.isfinite(self.value_below):
            raise SpecError("value_below", "must be a finite number")
        return self

    @property
    def test(self) -> str:
        """The test in words, as the manifest states it."""
        if self.value_below is not None:
            return f"value < {self.value_below:g}"
        return f"moe95 > {self.relative_margin_above:g} × |value|"


class StandardErrorsFile(FileDomain):
    """Sampling standard errors already published for the release's rows: a public CSV or
    parquet file with the key columns (and `level` with margins) and one column of SEs."""

    column: str = Field(  # type: ignore[assignment]  # a keys file's column is optional
        default="se", description="the file's column of standard errors (default `se`)"
    )


class SamplingInput(Strict):
    """The sampling error of one statistic, from public inputs only: the survey's design effect
    (with the released number of respondents per row), or standard errors already published."""

    design_effect: Positive | None = Field(
        default=None, description="deff from the survey's methodology: variance ÷ SRS variance"
    )
    respondents: str | None = Field(
        default=None,
        description="an unweighted count of the release: each row's sample size n (released, "
        "noisy), which the SRS variance divides by",
    )
    population: Positive | None = Field(
        default=None,
        description="N, the population the weights sum to: a weighted count's or sum's variance "
        "then has the factor 1 − N̂/N (default: left out, which only overstates the error)",
    )
    element_sd: Positive | None = Field(
        default=None,
        description="the column's standard deviation in the population, from public sources "
        "(default: the largest one its bounds allow for the released mean, (ȳ − lower)(upper − "
        "ȳ), which is p(1 − p) for a 0/1 column)",
    )
    standard_errors: StandardErrorsFile | None = Field(
        default=None, description="{file, column}: sampling SEs already published per row"
    )

    @model_validator(mode="after")
    def _one_source(self) -> SamplingInput:
        if (self.design_effect is None) == (self.standard_errors is None):
            raise ValueError("give design_effect (with respondents) or standard_errors")
        if self.standard_errors is not None:
            extra = [
                name
                for name in ("respondents", "population", "element_sd")
                if getattr(self, name) is not None
            ]
            if extra:
                raise SpecError(extra[0], "with standard_errors the file gives the SEs: remove it")
        elif self.respondents is None:
            raise SpecError(
                "respondents",
                "a design effect scales the SRS variance, which needs each row's sample size: "
                "name the release's unweighted count of respondents",
            )
        return self


class PostProcessing(Renamed):
    """Free by DP's post-processing property: applied to noisy values only."""

    nonnegative: bool = True
    decimals: Annotated[int, Field(ge=-3, le=12)] | None = Field(
        default=None,
        description="decimals of sums and means (negative: tens, hundreds, thousands); default: "
        "the place of the second significant digit of their 95% margin of error (the precision "
        "the noise leaves)",
    )
    moe95_columns: bool = True
    round_to: Annotated[int, Field(ge=2, le=MAX_BASE)] | None = Field(
        default=None,
        description="round counts and sums to multiples of this base (5, 10, 100): a controlled "
        "rounding that keeps every released margin the sum of its cells, unbiased, its margins "
        "of error widened by what it may move",
    )
    rules: Annotated[list[Rule], Field(min_length=1)] | None = Field(
        default=None,
        description="reliability rules on the released values: flag (u) or suppress values "
        "whose margin is large for their size or whose count is small",
    )


class ReleaseParts(SpecParts, Protocol):
    """What publication's checks read of the release spec (`ReleaseSpec`), by its shape."""

    @property
    def statistics(self) -> Sequence[Statistic]: ...
    @property
    def postprocess(self) -> PostProcessing: ...
    @property
    def sampling(self) -> Mapping[str, SamplingInput] | None: ...


def check_publication(spec: ReleaseParts) -> None:
    """The publication options against the rest of the spec; SpecError at their YAML path."""
    post = spec.postprocess
    stats = {s.name: s for s in spec.statistics}
    outputs = [column for s in spec.statistics for column in output_columns(s)]
    if post.decimals is not None and post.decimals < 0:
        place = 10.0**-post.decimals
        for index, stat in enumerate(spec.statistics):
            bounds = stat.value_range()
            if bounds is None:
                continue
            lower, upper = bounds
            if upper - lower < place:
                kind = stat.kind.value
                raise SpecError(
                    "postprocess.decimals",
                    f"{post.decimals} rounds {kind}s to multiples of {place:g}, coarser than the "
                    f"range [{lower:g}, {upper:g}] of {stat.name!r} "
                    f"(statistics[{index}]): a {kind} would show only a bound; use decimals ≥ "
                    f"{-math.floor(math.log10(upper - lower))} or release the {kind} "
                    "from a spec of its own",
                )
    if post.round_to is not None and not any(
        s.published_as is PublishedAs.TOTAL for s in spec.statistics
    ):
        raise SpecError(
            "postprocess.round_to", "rounds counts and sums, and this release has neither"
        )
    margins_released = post.moe95_columns
    flags = []
    names: set[str] = set()
    for index, rule in enumerate(post.rules or []):
        where = f"postprocess.rules[{index}]"
        name = rule.name or f"rule_{index + 1}"
        if name in names:
            raise SpecError(f"{where}.name", f"{name!r} names another rule too")
        names.add(name)
        for position, stat_name in enumerate(rule.statistics or []):
            if stat_name not in stats:
                raise SpecError(
                    f"{where}.statistics[{position}]",
                    f"{stat_name!r} is not a statistic of this release ({', '.join(stats)})",
                )
        tested = rule_statistics(spec, rule)
        if not tested:
            wanted = "count" if rule.value_below is not None else "statistic with a margin"
            raise SpecError(
                f"{where}.statistics", f"this release has no {wanted}: name the statistics tested"
            )
        if rule.relative_margin_above is not None and not margins_released:
            needs = [s for s in tested if stats[s].published_as is not PublishedAs.RANK]
            if needs:
                raise SpecError(
                    f"{where}.relative_margin_above",
                    "reads the released margins of error, and `postprocess.moe95_columns` is "
                    "false: set it to true (or test quantiles only, by their intervals)",
                )
    if post.rules:
        flags = [
            f"{column}{FLAG_SUFFIX}"
            for s in spec.statistics
            for column in statistic_value_columns(s)
        ]
    combined = []
    for stat_name, sampling in (spec.sampling or {}).items():
        where = f"sampling.{stat_name}"
        if stat_name not in stats:
            raise SpecError(
                where, f"{stat_name!r} is not a statistic of this release ({', '.join(stats)})"
            )
        stat = stats[stat_name]
        if stat.published_as is PublishedAs.RANK:
            raise SpecError(
                where,
                f"{stat_name!r} is a {stat.kind.value}: its interval is in ranks of the sample, "
                "with no sampling error to add; give sampling to counts, sums and means",
            )
        if stat.published_as is PublishedAs.RATIO and sampling.design_effect is not None:
            raise SpecError(
                f"{where}.design_effect",
                f"{stat_name!r} is a ratio of two sums: its sampling variance needs their "
                "covariance, which no design effect gives; give the standard_errors published "
                "for its cells",
            )
        weight = spec.survey_weight_of(stat)
        if stat.published_as is PublishedAs.TOTAL and weight is None:
            raise SpecError(
                where,
                f"{stat_name!r} is unweighted: it counts or sums the sample's own rows, which have "
                "no sampling error; a survey estimate is weighted (give it a survey_weight)",
            )
        if not margins_released:
            raise SpecError(
                where, "a combined margin adds to the released one: set moe95_columns: true"
            )
        if sampling.respondents is not None:
            counted = stats.get(sampling.respondents)
            if not (
                counted is not None
                and counted.provides == "count"
                and spec.survey_weight_of(counted) is None
            ):
                raise SpecError(
                    f"{where}.respondents",
                    f"{sampling.respondents!r} is not an unweighted count of this release: name "
                    "the count of respondents (every row counts once)",
                )
        if (
            stat.published_as is PublishedAs.TOTAL
            and stat.provides == "sum"
            and sampling.design_effect is not None
            and weighted_count_of(spec, stat) is None
        ):
            raise SpecError(
                where,
                f"the variance of {stat_name!r} needs each row's weighted count (its "
                "population): add a count weighted as the sum is",
            )
        combined.append(f"{stat_name}{COMBINED_SUFFIX}")
    generated = flags + combined
    clash = sorted({c for c in generated if c in outputs or generated.count(c) > 1})
    if clash:
        raise SpecError(
            "statistics",
            f"the generated columns {clash} would repeat another column: rename the statistic",
        )


def statistic_value_columns(stat: Statistic) -> list[str]:
    """The released value columns of a statistic that publication treats, each with its flag (a
    quantile's one per p; a randomized statistic's counts and shares)."""
    return [column for column, _ in stat.published_columns()]


def rule_statistics(spec: ReleaseParts, rule: Rule) -> list[str]:
    """The statistics a rule tests: those it names, else its default set (with `value_below`
    every count: of rows, weighted, or of randomized answers)."""
    if rule.statistics is not None:
        return list(rule.statistics)
    if rule.value_below is not None:
        return [s.name for s in spec.statistics if s.provides == "count" or s.randomized]
    return [s.name for s in spec.statistics]


def tested_columns(stat: Statistic, rule: Rule) -> list[str]:
    """The value columns of `stat` a rule tests: every one, but a `value_below` threshold only
    its totals where it has several kinds of value (a randomized statistic's counts, not its
    shares, which are fractions of the row: suppress those with `apply_to: row`)."""
    published = stat.published_columns()
    totals = [column for column, kind in published if kind is PublishedAs.TOTAL]
    if rule.value_below is not None and totals and len(totals) < len(published):
        return totals
    return [column for column, _ in published]


def weighted_count_of(spec: ReleaseParts, stat: Statistic) -> str | None:
    """The release's first count weighted as `stat` is (its rows' estimated population)."""
    weight = spec.survey_weight_of(stat)
    return next(
        (
            s.name
            for s in spec.statistics
            if s.provides == "count" and weight is not None and spec.survey_weight_of(s) == weight
        ),
        None,
    )


def read_standard_errors(
    spec: ReleaseParts, released_keys: pl.DataFrame, prefix: str
) -> dict[str, pl.DataFrame]:
    """Per statistic with `standard_errors`, the published SE of every released row: the
    released keys (and `level` with margins) and `_se`; SpecError at the file's YAML path for a
    file that cannot be read, lacks a column, or misses or repeats a released row."""
    found = {}
    keys = released_keys.columns
    for name, sampling in (spec.sampling or {}).items():
        source = sampling.standard_errors
        if source is None:
            continue
        where = f"{prefix}.sampling.{name}.standard_errors.file"
        frame = _read_keys_file(source, where)
        named = f"standard errors file {str(source.path)!r}"
        missing = [c for c in (*keys, source.column) if c not in frame.columns]
        if missing:
            raise SpecError(where, f"{named} has no column {missing[0]!r}")
        try:
            frame = frame.select(
                *(pl.col(c).cast(released_keys.schema[c]) for c in keys),
                pl.col(source.column).cast(pl.Float64).alias("_se"),
            )
        except pl.exceptions.PolarsError:
            raise SpecError(
                where,
                f"{named}: its keys do not convert to the release's key types, or "
                f"{source.column!r} holds something that is not a number",
            ) from None
        se = frame.get_column("_se")
        if se.is_null().any() or not se.is_finite().all() or (se < 0).any():
            raise SpecError(where, f"{named}: every standard error is a finite number ≥ 0")
        if not keys:  # an ungrouped release has one row: the file gives its SE
            if frame.height != 1:
                raise SpecError(where, f"{named}: an ungrouped release has one row; give one SE")
            found[name] = frame
            continue
        if frame.select(keys).is_duplicated().any():
            raise SpecError(where, f"{named} lists a row of the release more than once")
        matched = released_keys.join(frame, on=keys, how="left", nulls_equal=True)
        absent = matched.get_column("_se").is_null().sum()
        if absent:
            raise SpecError(
                where, f"{named} has no standard error for {absent} row(s) of the release"
            )
        found[name] = matched
    return found
