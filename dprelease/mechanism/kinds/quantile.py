"""`quantile` and `median`: quantiles per cell of a column clamped to [lower, upper] and rounded to
a public grid, each with a 95% interval (`mechanism.quantiles`: exact permute-and-flip over the
grid, several p's level by level, intervals from a noisy ladder of block counts).

Its share of the loss is spent by a selection mechanism, not by a noise law on a measurement:
the engine gives each cell's histogram over the grid (`GridPoint`), and the release draws the
values and the ladder from it after every measurement's noise. A quantile sees where rows are,
not only how many: a unit's change moves its kept rows between grid points, so a substitution
moves 2R rows (R removed, R added) even in an ungrouped release, where a count's Δ would stay R
(`change.reach`). Every p's value and the ladder compose sequentially within the statistic
(`QuantilePlan`), and the statistic composes sequentially with the release's others. Its error
is stated in ranks, without data; each cell's interval says it in the column's units.

Survey-weighted (the statistic's own `survey_weight`, else the release's), the ranks are weight
mass: each kept row weighs its weight clamped to [0, W] and rounded to a public step g (an
integer number of units, at most W/g), the histogram sums those units per grid point, and the
same mechanism runs on them with every Δ times W/g (a row moves mass by at most W/g units). The
weighted p-quantile is the grid point where the weight below reaches p of the cell's weight.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

import polars as pl
from pydantic import Field

from dprelease.errors import SpecError
from dprelease.loss import Measure, PrivacyLoss, laplace_epsilon
from dprelease.mechanism.engines import ExactAggregates, GridPoint, Number, Units
from dprelease.mechanism.kinds._kind import Allocated, Context, Kind
from dprelease.mechanism.kinds._measurement import Measurement
from dprelease.mechanism.kinds._stated import (
    EntryModel,
    ExactRational,
    ReleasedEntry,
    SurveyWeightEntry,
    missing_field,
    missing_text,
    spent,
    spent_by,
)
from dprelease.mechanism.margins import MarginAccuracy, Measured, Outcome
from dprelease.mechanism.noise import NoiseSource
from dprelease.mechanism.quantiles import (
    QuantileGrid,
    QuantilePlan,
    QuantileRelease,
    plan_quantiles,
    release_observed_quantiles,
)
from dprelease.spec import (
    HIGH_SUFFIX,
    LOW_SUFFIX,
    UNINFORMATIVE_SUFFIX,
    PostProcessing,
    QuantileStatistic,
    StatisticKind,
    SurveyWeight,
    exact_decimal,
    weight_steps,
)

MECHANISM = (
    "permute-and-flip (McKenna & Sheldon 2020) over the public grid with the score "
    "max(0, #{x < k} − p·n + 1/(2d), p·n − #{x ≤ k}) for p = a/d (how far p·n lies from "
    "k's ranks: 0 at the grid point of rank ⌈p·n⌉ alone, however many rows tie there), "
    "sampled exactly (every coin from one exact discrete "
    "Laplace draw, CKS 2020; uniform choice by exact rejection; OS CSPRNG bits); several p's "
    "level by level, middle first, each among the points its released neighbours in p leave "
    "(Kaplan, Schnapp & Stemmer 2022)"
)
INTERVAL_METHOD = (
    "one noisy ladder per cell: blocks of grid points that start as single points at each "
    "released value and double in width away from it, each block count with exact discrete "
    "Laplace noise; a cut is ruled out where a Chernoff bound on the summed noise, union-bounded "
    "over the cuts, says rank p·n cannot lie on its other side. The ends are then widened to be "
    "monotone in p and a value outside its interval is moved to its nearer end "
    "(post-processing; both keep the coverage)"
)
COVERAGE = (
    "each [low, high] holds the cell's true p-quantile of the rounded values (the grid point of "
    "rank ⌈p·n⌉) with probability ≥ 95% whatever the data (each side misses with probability ≤ "
    "2.5%); the bound is conservative, so the measured coverage is higher (docs/quantiles.md). "
    "It covers the DP noise only, not the sampling error of a survey"
)
WEIGHTED_COVERAGE = (
    "each [low, high] holds the cell's weighted p-quantile of the rounded values (the first "
    "grid point where the weight at or below it reaches p of the cell's weight, weights clamped "
    "to [0, W] and rounded to weight_resolution) with probability ≥ 95% whatever the data. "
    "That is the survey's estimate of the population's p-quantile: the interval covers the DP "
    "noise around that estimate only, not its sampling error"
)
DISCRETIZATION = (
    "each value is clamped to [lower, upper] and rounded to the nearest grid point ((x − lower) "
    "/ resolution, halves to even); a null or NaN value (or text that does not parse) counts "
    "as 0 if 0 is within [lower, upper], else as lower"
)


#: The ladder's share of a quantile statistic's ε, by how many p's it releases. A lone p gains
#: nothing from the level order, so every bit of ε its interval takes is lost to its value
#: (docs/quantiles.md measures the trade against OpenDP); several p's share one ladder and the
#: level order gives each more than an even split, which pays for a tenth.
INTERVAL_SHARE_ONE_P = Fraction(1, 40)
INTERVAL_SHARE_SEVERAL_PS = Fraction(1, 10)


def interval_share(count: int) -> Fraction:
    """The ladder's share of ε for a statistic of `count` p's (see the constants), unless the
    statistic sets its own `interval_share`."""
    return INTERVAL_SHARE_ONE_P if count == 1 else INTERVAL_SHARE_SEVERAL_PS


class QuantileValueEntry(EntryModel):
    """One p of a quantile statistic: where it is published and what its value costs and says."""

    p: float
    p_exact: ExactRational
    column: str = Field(description="the value's column; `<column>_low`, `_high`: its interval")
    epsilon: float = Field(description="ε of this p's permute-and-flip (its level's cost aside)")
    epsilon_exact: ExactRational
    score_sensitivity: float = Field(
        description="Δ of the score, in ranks: max(p, 1 − p) per row moved"
    )
    coin_scale_exact: ExactRational = Field(
        description="the coins' exact scale 2Δ/ε, in units of 1/(2d) rank for p = a/d"
    )
    rank_error95: float = Field(
        description="data-free: with probability ≥ 95% the value's rank is within this many "
        "ranks of p·n (its ranks #{x < value} to #{x ≤ value} come that close to p·n); "
        "survey-weighted, ranks are weight (Σ w below the value against p·Σ w)"
    )
    interval_rank_halfwidth95: float = Field(
        description="data-free: how far from p·n (ranks; weighted: weight) a ladder cut can be "
        "and not be ruled out"
    )


class QuantileWeightEntry(SurveyWeightEntry):
    """A weighted quantile's weight: each row's clamped to [0, upper] and rounded to a step."""

    resolution_exact: ExactRational = Field(description="the step g each weight is rounded to")
    mass_moved_exact: ExactRational = Field(
        description="the most weight one unit's change moves over the histograms: rows_moved × "
        "W (W rounded to the step); every Δ of the entry is this weight times the unweighted one"
    )


class QuantileEntry(ReleasedEntry):
    """A quantile statistic (a median: p = 0.5): values and 95% intervals per cell."""

    kind: Literal["quantile", "median"]
    calibrated_epsilon_exact: ExactRational | None = Field(
        default=None,
        description="in a zCDP release: the ε its ρ buys (the largest with ε²/2 ≤ ρ), which the "
        "values and the ladder share as value_epsilon and interval_epsilon",
    )
    column: str
    lower: float
    upper: float
    resolution: float
    grid_points: int = Field(description="B: lower, lower + resolution, …, upper")
    discretization: str
    rows_moved: int = Field(description="rows one unit's change moves over the histograms")
    survey_weight: QuantileWeightEntry | None = Field(
        default=None,
        description="weighted: ranks are weight mass (None: every row counts once)",
    )
    derivation: str = Field(description="how every sensitivity follows from the bounds")
    value_epsilon: float
    value_epsilon_exact: ExactRational
    level_costs: list[ExactRational] = Field(
        description="per level of the release order (middle p first): its cost in units of a "
        "p's ε; they add up to value_epsilon / ε_p"
    )
    interval_epsilon: float
    interval_epsilon_exact: ExactRational
    interval_share: ExactRational
    interval_noise_scale_exact: ExactRational = Field(
        description="discrete Laplace scale of each ladder block count (L1 Δ = rows_moved; "
        "weighted: in the weight's steps, L1 Δ = mass_moved / resolution)"
    )
    interval_method: str
    coverage: str
    uninformative: str = Field(
        description="which cells' `_uninformative` flag is true: the interval is the whole grid"
    )
    error_in_units: str
    quantiles: list[QuantileValueEntry]
    missing: str | None = missing_field()

    def accuracy(
        self, by_name: Mapping[str, ReleasedEntry], targets: Mapping[str, float]
    ) -> dict[str, Any]:
        """Its error is in ranks, per p: Δ is its score's largest, in ranks (survey-weighted:
        both in weight, `weighted_by` naming the weight); no scale and no margin in the
        column's units."""
        return {
            **spent_by(self),
            "sensitivity": max(q.score_sensitivity for q in self.quantiles),
            "derivation": self.derivation,
            "scale": None,
            "moe95": None,
            "quantiles": [
                {
                    "p": q.p,
                    "column": q.column,
                    "rank_error95": q.rank_error95,
                    "interval_rank_halfwidth95": q.interval_rank_halfwidth95,
                }
                for q in self.quantiles
            ],
            "error_in_units": self.error_in_units,
            "weighted_by": None if self.survey_weight is None else self.survey_weight.column,
        }


def _decimal(x: float) -> str:
    return f"{x:.3g}" if x < 100 else f"{x:,.0f}"


def units_statement(q: QuantileAllocation) -> str:
    """The error in the column's units, as far as it can be said without data."""
    ps = q.plan.ps
    ranks = ", ".join(
        f"{_decimal(t)} (p = {float(p):g})" for p, t in zip(ps, q.plan.rank_error95, strict=True)
    )
    half = float(q.grid.resolution) / 2
    if q.weight is not None:
        return (
            f"in weight, 95%: within {ranks} of p·Σw (Σ w of {q.weight.column}, clamped to "
            f"[0, {q.weight.upper:g}]); so for a cell of total weight N the value lies between "
            f"its weighted (p − T/N)- and (p + T/N)-quantiles, plus the grid's rounding "
            f"(±{half:g}). In the column's units that is T weight's worth of the cell's values "
            "around the quantile, which only the data know: each cell's [low, high] columns "
            "state it"
        )
    return (
        f"in ranks, 95%: within {ranks} of p·n; so for a cell of n rows the value lies between "
        f"its (p − T/n)- and (p + T/n)-quantiles, plus the grid's rounding (±{half:g}). In the "
        "column's units that is T rows' worth of the cell's values around the quantile, which "
        "only the data know: each cell's [low, high] columns state it"
    )


#: Where a substituted unit's added rows may land in a quantile's histograms.
_ON_THE_GRID = "elsewhere on the grid (a quantile sees where rows are, so also without groups)"


@dataclass(frozen=True)
class QuantileAllocation(Allocated):
    """How a quantile statistic is made: its grid, its loss (its share of the release's, in
    the release's measure) and the exact plan of its values and intervals at `plan.epsilon`,
    with the derivation of every sensitivity the manifest states."""

    statistic: QuantileStatistic
    grid: QuantileGrid
    plan: QuantilePlan
    derivation: str
    weight: SurveyWeight | None = None  # weighted: ranks are weight mass

    def read_columns(self) -> list[str]:
        weight = [] if self.weight is None else [self.weight.column]
        return [self.statistic.column, *weight]

    def histograms(self, reads: list[str]) -> list[GridPoint]:
        """Its column's histogram over the grid per cell: each kept row's value by the nulls
        rule of a sum (with `missing: drop`, a row without a value has no point), clamped, at
        its nearest grid point (`QuantileGrid.discretize`)."""
        stat = self.statistic
        drop = stat.missing == "drop"
        number = Number.clamped(reads.index(stat.column), stat.lower, stat.upper, drop=drop)
        mass = None
        if self.weight is not None:  # its weight by the nulls rule, in steps, ≤ W in steps
            weight = Number.clamped(reads.index(self.weight.column), 0.0, self.weight.upper)
            step = float(self.plan.mass_unit)
            mass = Units(stat.name, (weight,), step, 0, self.plan.mass_per_row)
        resolution = float(self.grid.resolution)
        return [GridPoint(stat.name, number, stat.lower, resolution, self.grid.bins, mass)]

    def select(self, exact: ExactAggregates, cells: int, source: NoiseSource) -> QuantileRelease:
        """Every p drawn for every cell of the key grid, from the observed (cell, grid point)
        counts; an unobserved cell is an empty histogram, drawn like any other."""
        histogram = exact.histograms[self.statistic.name]
        return release_observed_quantiles(
            cells,
            histogram.get_column("cell").to_numpy(),
            histogram.get_column("point").to_numpy(),
            histogram.get_column("rows").to_numpy(),
            self.plan,
            source,
        )

    def columns(
        self, released: Mapping[str, Measured], selected: Any, post: PostProcessing
    ) -> list[pl.Series]:
        """Each p's released value and its 95% interval (`_low`, `_high`), in the column's
        units: grid points, monotone in p, low ≤ value ≤ high (the mechanism's
        post-processing); and `_uninformative`, true where the interval is the whole grid (the
        value then says nothing the bounds did not, as a mean's flag says of its margin)."""
        drawn: QuantileRelease = selected
        out = []
        for j, name in enumerate(self.statistic.value_columns()):
            for suffix, points in (
                ("", drawn.values),
                (LOW_SUFFIX, drawn.low),
                (HIGH_SUFFIX, drawn.high),
            ):
                values = self.grid.values(points[:, j])
                out.append(pl.Series(f"{name}{suffix}", values, dtype=pl.Float64))
            whole = (drawn.low[:, j] == 0) & (drawn.high[:, j] == self.grid.bins - 1)
            out.append(pl.Series(f"{name}{UNINFORMATIVE_SUFFIX}", whole, dtype=pl.Boolean))
        return out

    def entry(
        self, post: PostProcessing, margins: MarginAccuracy | None, outcome: Outcome | None
    ) -> QuantileEntry:
        """The manifest's entry of one quantile statistic (the planner states the same)."""
        plan, stat = self.plan, self.statistic
        value_entries = [
            QuantileValueEntry(
                p=float(p),
                p_exact=str(p),
                column=column,
                epsilon=float(plan.node_epsilon),
                epsilon_exact=str(plan.node_epsilon),
                score_sensitivity=float(max(p, 1 - p) * plan.mass_moved * plan.mass_unit),
                coin_scale_exact=str(scale),
                rank_error95=rank,
                interval_rank_halfwidth95=halfwidth,
            )
            for p, column, scale, rank, halfwidth in zip(
                plan.ps,
                stat.value_columns(),
                plan.value_scales,
                plan.rank_error95,
                plan.interval_rank_halfwidth,
                strict=True,
            )
        ]

        share = plan.interval_epsilon / plan.epsilon
        zcdp = self.loss.measure is not Measure.PURE
        return QuantileEntry(
            name=stat.name,
            kind="median" if stat.kind.value == "median" else "quantile",
            **spent(self.loss),
            calibrated_epsilon_exact=str(plan.epsilon) if zcdp else None,
            mechanism=MECHANISM,
            column=stat.column,
            lower=stat.lower,
            upper=stat.upper,
            resolution=stat.resolution,
            grid_points=self.grid.bins,
            discretization=DISCRETIZATION,
            rows_moved=plan.rows_moved,
            survey_weight=None
            if self.weight is None
            else QuantileWeightEntry(
                column=self.weight.column,
                upper=self.weight.upper,
                resolution_exact=str(plan.mass_unit),
                mass_moved_exact=str(plan.mass_moved * plan.mass_unit),
            ),
            derivation=self.derivation,
            value_epsilon=float(plan.value_epsilon),
            value_epsilon_exact=str(plan.value_epsilon),
            level_costs=[str(Fraction(cost)) for cost in plan.level_costs],
            interval_epsilon=float(plan.interval_epsilon),
            interval_epsilon_exact=str(plan.interval_epsilon),
            interval_share=str(share),
            interval_noise_scale_exact=str(plan.interval_scale),
            interval_method=INTERVAL_METHOD,
            coverage=COVERAGE if self.weight is None else WEIGHTED_COVERAGE,
            uninformative=f"where a value's 95% interval is the whole grid [{stat.lower:.15g}, "
            f"{stat.upper:.15g}], the value says nothing the bounds did not (too few rows or too "
            f"little ε for that cell): its `{UNINFORMATIVE_SUFFIX}` column is true there",
            error_in_units=units_statement(self),
            quantiles=value_entries,
            missing=missing_text(stat.column, stat.missing),
        )


class Quantile(Kind):
    names = (StatisticKind.QUANTILE.value, StatisticKind.MEDIAN.value)
    model = QuantileStatistic
    entry = QuantileEntry

    def no_target(self, stat: QuantileStatistic) -> str:
        return (
            f"{stat.name!r} is a {stat.kind.value}: it has no margin of error in the "
            "column's units (its 95% rank error is in the plan); target counts and sums"
        )

    def allocate(
        self,
        stat: QuantileStatistic,
        share: PrivacyLoss,
        ctx: Context,
        owned: Mapping[str, Measurement],
        path: str,
    ) -> QuantileAllocation:
        """The plan of `stat` at its `share` of the release's loss; SpecError naming `path` for an
        ε too small for the sampler."""
        epsilon = laplace_epsilon(share)  # in a zCDP release, as for Laplace noise there
        grid = QuantileGrid.from_bounds(stat.lower_exact, stat.upper_exact, stat.resolution_exact)
        moved, why = ctx.resolved.spec.unit_bounds.reach(ctx.neighbours, _ON_THE_GRID)
        weight = ctx.resolved.spec.survey_weight_of(stat)
        step, per_row = (
            (Fraction(1), 1) if weight is None else weight_steps(weight, stat.weight_resolution)
        )
        try:
            plan = plan_quantiles(
                list(stat.ps),
                epsilon,
                grid.bins,
                ctx.resolved.spec.unit_bounds.rows,
                ctx.neighbours,
                interval_share=interval_share(len(stat.ps))
                if stat.interval_share is None
                else exact_decimal(stat.interval_share, "interval_share"),
                mass_per_row=per_row,
                mass_unit=step,
            )
        except SpecError as exc:
            raise SpecError(f"{path}.{exc.path}", exc.message) from None
        derivation = (
            _derivation(plan, why)
            if weight is None
            else _weighted_derivation(plan, why, weight, step, per_row)
        )
        return QuantileAllocation(stat, share, grid, plan, derivation, weight)


def _derivation(plan: QuantilePlan, why: str) -> str:
    """How an unweighted quantile's sensitivities follow from the contribution bounds."""
    moved = plan.rows_moved
    scores = ", ".join(
        f"p = {float(p):g}: {float(max(p, 1 - p)):g} rank per row → Δ = "
        f"{float(max(p, 1 - p)) * moved:g} rank"
        for p in plan.ps
    )
    return (
        f"quantile: {why} → {moved} row(s) moved over the cells' histograms. Values "
        f"(permute-and-flip, coin scale 2Δ/ε_p): one row moves a p's score "
        f"max(0, #{{x < k}} − p·n + 1/(2d), p·n − #{{x ≤ k}}) by at most max(p, 1 − p) rank "
        f"(n moves p·n by p, #{{x < k}} and #{{x ≤ k}} by 1 or 0 with it); {scores}. "
        f"Intervals (ladder of block counts, discrete Laplace): one row moves one block by 1 → "
        f"L1 Δ = {moved}"
    )


def _weighted_derivation(
    plan: QuantilePlan, why: str, weight: SurveyWeight, step: Fraction, per_row: int
) -> str:
    """How a weighted quantile's sensitivities follow from the contribution bounds and W."""
    moved = plan.rows_moved
    mass = plan.mass_moved * step
    scores = ", ".join(
        f"p = {float(p):g}: Δ = {float(max(p, 1 - p)):g} × {float(mass):g} = "
        f"{float(max(p, 1 - p) * mass):g} weight"
        for p in plan.ps
    )
    return (
        f"weighted quantile: {why} → {moved} row(s) moved over the cells' histograms, each "
        f"weighing at most W = {weight.upper:g} ({weight.column} clamped to [0, W], rounded to "
        f"a step of {float(step):g}: at most {per_row} steps) → {float(mass):g} weight moved. "
        f"Values (permute-and-flip, coin scale 2Δ/ε_p, in steps): one row of weight w moves a "
        f"p's score max(0, W(<k) − p·N + 1/(2d) step, p·N − W(≤k)) (N = Σ w of the cell, W(<k) "
        f"the weight below grid point k) by at most max(p, 1 − p)·w (N moves p·N by p·w, W(<k) "
        f"and W(≤k) by w or 0 with it); {scores}. Intervals (ladder of block weights, discrete "
        f"Laplace in steps): one row moves one block by at most W → L1 Δ = {float(mass):g} "
        f"weight ({plan.mass_moved} steps)"
    )


def quantile_allocations(statistics: list[Allocated]) -> list[QuantileAllocation]:
    """The quantile statistics of an allocation (each reads its column's histogram)."""
    return [a for a in statistics if isinstance(a, QuantileAllocation)]
