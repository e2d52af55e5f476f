"""What the manifest (and the planner) says about a quantile statistic, from its plan alone.

The values' and the ladder's ε, every sensitivity with its derivation, the grid, how the
intervals are made and what their coverage means, and the data-free accuracy in ranks. Nothing
here reads data: the per-cell width of an interval in the column's units is in the table.
"""

from __future__ import annotations

from fractions import Fraction

from dprelease.loss import Measure
from dprelease.mechanism import QuantileAllocation
from dprelease.statement._manifest import QuantileEntry, QuantileValueEntry, spent

MECHANISM = (
    "permute-and-flip (McKenna & Sheldon 2020) over the public grid with the score "
    "|#{x < k} + ½·#{x = k} − p·n|, sampled exactly (every coin from one exact discrete "
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
DISCRETIZATION = (
    "each value is clamped to [lower, upper] and rounded to the nearest grid point ((x − lower) "
    "/ resolution, halves to even); a null or NaN value (or text that does not parse) counts "
    "as 0 if 0 is within [lower, upper], else as lower"
)


def _decimal(x: float) -> str:
    return f"{x:.3g}" if x < 100 else f"{x:,.0f}"


def units_statement(q: QuantileAllocation) -> str:
    """The error in the column's units, as far as it can be said without data."""
    ps = q.plan.ps
    ranks = ", ".join(
        f"{_decimal(t)} (p = {float(p):g})" for p, t in zip(ps, q.plan.rank_error95, strict=True)
    )
    half = float(q.grid.resolution) / 2
    return (
        f"in ranks, 95%: within {ranks} of p·n; so for a cell of n rows the value lies between "
        f"its (p − T/n)- and (p + T/n)-quantiles, plus the grid's rounding (±{half:g}). In the "
        "column's units that is T rows' worth of the cell's values around the quantile, which "
        "only the data know: each cell's [low, high] columns state it"
    )


def quantile_entry(q: QuantileAllocation) -> QuantileEntry:
    """The manifest's entry of one quantile statistic (the planner states the same)."""
    plan, stat = q.plan, q.statistic
    value_entries = [
        QuantileValueEntry(
            p=float(p),
            p_exact=str(p),
            column=column,
            epsilon=float(plan.node_epsilon),
            epsilon_exact=str(plan.node_epsilon),
            score_sensitivity=float(max(p, 1 - p) * plan.rows_moved),
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
    zcdp = q.loss.measure is not Measure.PURE
    return QuantileEntry(
        name=stat.name,
        kind="median" if stat.kind.value == "median" else "quantile",
        **spent(q.loss),
        calibrated_epsilon_exact=str(plan.epsilon) if zcdp else None,
        mechanism=MECHANISM,
        column=stat.column,
        lower=stat.lower,
        upper=stat.upper,
        resolution=stat.resolution,
        grid_points=q.grid.bins,
        discretization=DISCRETIZATION,
        rows_moved=plan.rows_moved,
        derivation=q.derivation,
        value_epsilon=float(plan.value_epsilon),
        value_epsilon_exact=str(plan.value_epsilon),
        level_costs=[str(Fraction(cost)) for cost in plan.level_costs],
        interval_epsilon=float(plan.interval_epsilon),
        interval_epsilon_exact=str(plan.interval_epsilon),
        interval_share=str(share),
        interval_noise_scale_exact=str(plan.interval_scale),
        interval_method=INTERVAL_METHOD,
        coverage=COVERAGE,
        error_in_units=units_statement(q),
        quantiles=value_entries,
    )
