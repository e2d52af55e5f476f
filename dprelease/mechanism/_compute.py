"""One release computed, in the steps every kind follows: exact integer aggregates from an engine,
exact noise for every measurement (and level), each kind's selection mechanism, then
post-processing into the released columns.

Nothing here knows about ledgers, files or manifests, nor asks which kind a statistic is. The
noise batches have the public sizes of the key grid (and of each level), never a data value, and
nothing after the aggregation can fail because of a value: PRIVACY.md states the rule.

Each step is a library function of its own, so a release need not run them in one process:

    resolved = select_keys(data, resolved, allocation, period, engine, source)  # select: true
    exact = aggregate(data, resolved, allocation, period, engine)   # a site's exact integers
    pooled = exact.added(other_site)                                # aggregates add up
    totals = noisy_totals(allocation, resolved, pooled, source)     # or noise shares, summed
    table, outcome = released_table(resolved, allocation, margins, totals, selected)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from dprelease import operator
from dprelease.mechanism._allocation import Allocation
from dprelease.mechanism.engines import (
    DataSource,
    EngineJob,
    ExactAggregates,
    InputSummary,
    get_engine,
    new_salt,
)
from dprelease.mechanism.margins import (
    MarginAccuracy,
    Measured,
    Outcome,
    from_noisy,
    level_sums,
    release_levels,
)
from dprelease.mechanism.noise import NoiseSource
from dprelease.mechanism.selection import released_keys
from dprelease.period import Period
from dprelease.spec import ResolvedSpec


@dataclass(frozen=True)
class Computed:
    """A computed release: the noisy table, what post-processing did that depends on the noisy
    values (with margins), the private input summary (never published) and the spec it was
    computed over (with key selection: holding the released keys, a DP output)."""

    table: pl.DataFrame
    outcome: Outcome | None
    summary: InputSummary = field(repr=False)
    resolved: ResolvedSpec | None = field(default=None, repr=False)


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


def aggregate(
    data: DataSource,
    resolved: ResolvedSpec,
    allocation: Allocation,
    period: Period | None,
    engine: str,
) -> ExactAggregates:
    """The exact integer aggregates of the allocation's row plan over the public key grid (and
    the private input summary), with a fresh CSPRNG salt for the contribution bounding. Never
    published: only noise makes anything of them publishable."""
    return get_engine(engine).aggregate(EngineJob(data, resolved, allocation, period), new_salt())


def select_keys(
    data: DataSource,
    resolved: ResolvedSpec,
    allocation: Allocation,
    period: Period | None,
    engine: str,
    source: NoiseSource,
) -> ResolvedSpec:
    """Draw every key selection (`select: true`) and return the spec whose selected entries
    hold the keys released: their `always` keys and the candidates the selection kept, a DP
    output, so everything after runs on a grid that is public from here on. Each selection
    reads its own aggregate (`DistinctUnits`, a fresh CSPRNG salt each, never shown) and draws
    one keep decision per candidate; nothing about the candidates leaves this function but the
    keys kept."""
    if not allocation.selections:
        return resolved
    chosen = get_engine(engine)
    job = EngineJob(data, resolved, allocation, period)
    selected = resolved
    for term, selection in zip(job.plan.selections, allocation.selections, strict=True):
        candidates, units = chosen.distinct_units(job, term, new_salt())
        keep = selection.plan.select(units, source)
        always = resolved.domains[term.group]
        keys = released_keys(candidates, keep, always if always.height else None)
        selected = selected.with_keys(term.group, keys)
    return selected


def noisy_totals(
    allocation: Allocation, resolved: ResolvedSpec, exact: ExactAggregates, source: NoiseSource
) -> dict[str, tuple[pl.Series, ...]]:
    """Every measurement's noisy integer totals at every level (the cells, then each margin):
    its exact aggregate (a margin row: the exact sum of its cells) plus one batch of exact noise
    per level, drawn in the allocation's order. Int128, in units of the measurement's
    granularity: cannot overflow (|Δ| ≤ 2^53 per row)."""
    levels = resolved.levels
    totals = {}
    for m in allocation.measurements:
        cells = exact.of(m)
        exacts = [cells] if levels is None else level_sums(cells, levels)
        sizes = [resolved.cells] if levels is None else levels.sizes
        totals[m.name] = tuple(
            level_exact + pl.Series(level.draw(size, source))
            for level_exact, level, size in zip(exacts, m.levels, sizes, strict=True)
        )
    return totals


def released_table(
    resolved: ResolvedSpec,
    allocation: Allocation,
    margins: MarginAccuracy | None,
    totals: Mapping[str, Sequence[pl.Series]],
    selected: Mapping[str, Any],
) -> tuple[pl.DataFrame, Outcome | None]:
    """Post-processing: the released table from the noisy integer totals (made consistent and
    rounded with margins) and each statistic's selection, and what the rounding did (with
    margins; it depends on the noisy values only)."""
    post = resolved.spec.postprocess
    outcome = None
    released: dict[str, Measured]
    if margins is None:
        cells = {name: levels[0] for name, levels in totals.items()}
        released = from_noisy(allocation.measurements, cells, post)
        keys = resolved.key_grid
    else:
        released, outcome = release_levels(allocation.measurements, totals, margins)
        keys = resolved.released_keys
    columns = [
        column
        for a in allocation.statistics
        for column in a.columns(released, selected.get(a.statistic.name), post)
    ]
    return pl.DataFrame([*keys.get_columns(), *columns]), outcome


def compute(
    data: DataSource,
    resolved: ResolvedSpec,
    allocation: Allocation,
    margins: MarginAccuracy | None,
    period: Period | None,
    engine: str,
    source: NoiseSource,
) -> Computed:
    """Aggregate exactly, add exact noise to every measurement (and level), draw every
    selection mechanism, then post-process. Data-dependent warnings go to the operator channel
    only. Key selections are drawn first: the rest is computed over the keys they released."""
    resolved = select_keys(data, resolved, allocation, period, engine, source)
    exact = aggregate(data, resolved, allocation, period, engine)
    shown_period = None if period is None else str(period)
    for message in exact.summary.warnings(
        resolved.spec.name, shown_period, resolved.spec.missing_rules()
    ):
        operator.warn(message)
    totals = noisy_totals(allocation, resolved, exact, source)
    selected = {  # after every measurement's noise; each draws a public number of variates
        a.statistic.name: a.select(exact, resolved.cells, source) for a in allocation.statistics
    }
    table, outcome = released_table(resolved, allocation, margins, totals, selected)
    return Computed(table, outcome, exact.summary, resolved)
