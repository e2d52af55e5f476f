"""How a release is computed, by method: sensitivity, noise, statistic kinds, margins, engines.

    allocation = allocate(resolved, PrivacyLoss.pure(eps), change)   # Δ, shares, scales: no data
    margins = margin_accuracy(resolved, allocation)               # with margins: every level
    check_input(data, resolved, allocation, period, "polars")     # the declared schema
    computed = compute(data, resolved, allocation, margins, period, "polars", source)

The rooms: `sensitivity/` (how far one unit's change moves a vector, from `change.reach`),
`noise/` (exact samplers and their families), `kinds/` (one module per statistic kind and the
registry), `quantiles/` (the quantile's selection mechanism), `margins/` (consistency, margins
of error, rounding), `engines/` (the row plan and its polars and Spark translations).

Allocation (`allocate`) reads only the resolved spec and the loss, so everything it decides can
be published; `compute` is the only step that reads confidential rows, and what leaves it is the
noisy table (and a private input summary for the operator and the ledger). Its steps are library
functions of their own (`aggregate`, `noisy_totals`, `released_table`).
"""

from dprelease.mechanism._allocation import Allocation, KeySelection, allocate, margin_accuracy
from dprelease.mechanism._compute import (
    Computed,
    aggregate,
    check_input,
    compute,
    noisy_totals,
    released_table,
    select_keys,
    summarize_input,
)
from dprelease.mechanism.engines import DataSource, ExactAggregates, InputSummary, RowPlan
from dprelease.mechanism.kinds import (
    Allocated,
    MarginMeasurement,
    Measurement,
    QuantileAllocation,
    auto_granularity,
    granularity_references,
    kind_of,
)
from dprelease.mechanism.margins import (
    ROUNDING_RULE,
    WEIGHTED_ROUNDING,
    LevelLaws,
    MarginAccuracy,
    Outcome,
    noise_decimals,
)
from dprelease.mechanism.noise import LN_20, LevelNoise, noise_family
from dprelease.mechanism.sensitivity import rows_reach, sensitivity_bound

__all__ = [
    "LN_20",
    "ROUNDING_RULE",
    "WEIGHTED_ROUNDING",
    "Allocated",
    "Allocation",
    "Computed",
    "DataSource",
    "ExactAggregates",
    "InputSummary",
    "KeySelection",
    "LevelLaws",
    "LevelNoise",
    "MarginAccuracy",
    "MarginMeasurement",
    "Measurement",
    "Outcome",
    "QuantileAllocation",
    "RowPlan",
    "aggregate",
    "allocate",
    "auto_granularity",
    "check_input",
    "compute",
    "granularity_references",
    "kind_of",
    "margin_accuracy",
    "noise_decimals",
    "noise_family",
    "noisy_totals",
    "released_table",
    "select_keys",
    "rows_reach",
    "sensitivity_bound",
    "summarize_input",
]
