"""One release computed: exact aggregates from an engine, one batch of exact noise per
measurement (and level), post-processing into the released columns.

Nothing here knows about ledgers, files or manifests. The noise batches have the public sizes of
the key grid (and of each level), never a data value, and nothing after the aggregation can fail
because of a value: PRIVACY.md states the rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from dprelease import operator
from dprelease.mechanism._accounting import Allocation
from dprelease.mechanism._margins import MarginAccuracy, Outcome, release_levels
from dprelease.mechanism._postprocess import columns, from_noisy, quantile_columns
from dprelease.mechanism._quantile_accounting import QuantileAllocation
from dprelease.mechanism.engines import (
    DataSource,
    EngineJob,
    InputSummary,
    get_engine,
    new_salt,
)
from dprelease.mechanism.noise import NoiseSource
from dprelease.mechanism.quantiles import QuantileRelease, release_observed_quantiles
from dprelease.period import Period
from dprelease.spec import ResolvedSpec


@dataclass(frozen=True)
class Computed:
    """A computed release: the noisy table, what post-processing did that depends on the noisy
    values (with margins), and the private input summary (never published)."""

    table: pl.DataFrame
    outcome: Outcome | None
    summary: InputSummary = field(repr=False)


def check_input(
    data: DataSource,
    resolved: ResolvedSpec,
    allocation: Allocation,
    period: Period | None,
    engine: str,
) -> None:
    """Everything about the input that can be checked without reading a row (its declared
    schema against the spec); a typed error naming the column otherwise."""
    get_engine(engine).check(EngineJob(data, resolved, allocation, period))


def summarize_input(
    data: DataSource,
    resolved: ResolvedSpec,
    allocation: Allocation,
    period: Period | None,
    engine: str,
) -> InputSummary:
    """The private input summary alone (one pass over the input; no noise, no release): for a
    re-run whose stored release is returned, to tell the operator whether the input changed."""
    return get_engine(engine).summarize(EngineJob(data, resolved, allocation, period))


def compute(
    data: DataSource,
    resolved: ResolvedSpec,
    allocation: Allocation,
    margins: MarginAccuracy | None,
    period: Period | None,
    engine: str,
    source: NoiseSource,
) -> Computed:
    """Aggregate exactly, add one batch of discrete Laplace noise per measurement (and level),
    then post-process. Data-dependent warnings go to the operator channel only."""
    job = EngineJob(data, resolved, allocation, period)
    exact = get_engine(engine).aggregate(job, new_salt())
    shown_period = None if period is None else str(period)
    for message in exact.summary.warnings(resolved.spec.name, shown_period):
        operator.warn(message)
    post = resolved.spec.postprocess
    outcome = None
    if margins is None:
        cells = resolved.cells
        noisy = {  # Int128, in units of m.granularity: cannot overflow (|Δ| ≤ 2^53 per row)
            m.name: exact.of(m) + pl.Series(m.draw(cells, source)) for m in allocation.measurements
        }
        measured = from_noisy(allocation.measurements, noisy, post)
        keys = exact.keys
    else:
        measured, outcome = release_levels(exact, allocation, margins, source)
        keys = resolved.released_keys
    drawn = {  # after every measurement's noise; each draws a public number of variates
        q.statistic.name: _quantiles(q, exact.histograms[q.statistic.name], resolved, source)
        for q in allocation.quantiles
    }
    table = pl.DataFrame(
        [
            *keys.get_columns(),
            *(
                col
                for a in allocation.statistics
                for col in (
                    quantile_columns(a, drawn[a.statistic.name])
                    if isinstance(a, QuantileAllocation)
                    else columns(a, measured, post)
                )
            ),
        ]
    )
    return Computed(table, outcome, exact.summary)


def _quantiles(
    q: QuantileAllocation, histogram: pl.DataFrame, resolved: ResolvedSpec, source: NoiseSource
) -> QuantileRelease:
    """One quantile statistic drawn for every cell of the key grid, from the observed
    (cell, grid point) counts; an unobserved cell is an empty histogram, drawn like any other."""
    return release_observed_quantiles(
        resolved.cells,
        histogram.get_column("cell").to_numpy(),
        histogram.get_column("point").to_numpy(),
        histogram.get_column("rows").to_numpy(),
        q.plan,
        source,
    )
