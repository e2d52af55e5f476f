"""How a release is computed: accounting, exact noise, engines, margins, post-processing.

    allocation = allocate(resolved, PrivacyLoss.pure(eps), change)   # Δ, shares, scales: no data
    margins = margin_accuracy(resolved, allocation)               # with margins: every level
    check_input(data, resolved, allocation, period, "polars")     # the declared schema
    computed = compute(data, resolved, allocation, margins, period, "polars", source)

Accounting (`allocate`) reads only the resolved spec and the loss, so everything it decides can
be published; `compute` is the only step that reads confidential rows, and what leaves it is the
noisy table (and a private input summary for the operator and the ledger). Engines (polars,
Spark) turn rows into exact integer aggregates and know nothing of noise or ledgers.
"""

from dprelease.mechanism._accounting import (
    Allocation,
    MarginMeasurement,
    Measurement,
    StatisticAllocation,
    allocate,
    auto_granularity,
    granularity_references,
)
from dprelease.mechanism._compute import Computed, check_input, compute, summarize_input
from dprelease.mechanism._l1 import rows_reach
from dprelease.mechanism._margins import LevelLaws, MarginAccuracy, Outcome, margin_accuracy
from dprelease.mechanism._postprocess import (
    ROUNDING_RULE,
    WEIGHTED_ROUNDING,
    noise_decimals,
    sum_decimals,
)
from dprelease.mechanism._quantile_accounting import QuantileAllocation
from dprelease.mechanism._targets import sensitivity_bound
from dprelease.mechanism.engines import DataSource, InputSummary
from dprelease.mechanism.noise import LN_20, LevelNoise

__all__ = [
    "LN_20",
    "ROUNDING_RULE",
    "WEIGHTED_ROUNDING",
    "Allocation",
    "Computed",
    "DataSource",
    "InputSummary",
    "LevelLaws",
    "LevelNoise",
    "MarginAccuracy",
    "MarginMeasurement",
    "Measurement",
    "Outcome",
    "QuantileAllocation",
    "StatisticAllocation",
    "allocate",
    "auto_granularity",
    "check_input",
    "compute",
    "granularity_references",
    "margin_accuracy",
    "noise_decimals",
    "rows_reach",
    "sensitivity_bound",
    "sum_decimals",
    "summarize_input",
]
