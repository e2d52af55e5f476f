"""Margins: what post-processing makes of noisy integer vectors, at no cost in privacy.

Tables that add up (a spec's `margins:`): every level of a vector is measured, then the weighted
least-squares estimate of the cells from every level (`_consistency`), their exact 95% margins of
error (`_moe`, from the noise laws alone: stated before any budget is spent) and a controlled
rounding that keeps every margin the sum of its cells (`_rounding`). And for every release, the
publication rule: values in the column's units, counts clamped at 0, rounded to the place the
noise leaves (`_decimals`).

The solvers (scipy, Clarabel, HiGHS) load only for a release with margins: this face imports
none of them.

    margins = margin_accuracy(resolved, vectors, published)   # public: before any noise
    released, outcome = release_levels(vectors, noisy_totals, margins)
    released = from_noisy(vectors, noisy_cells, post)          # a release without margins
"""

from dprelease.mechanism.margins._decimals import (
    ROUNDING_RULE,
    WEIGHTED_ROUNDING,
    Measured,
    count_columns,
    from_noisy,
    noise_decimals,
    places_of,
    published_decimals,
    round_to,
    value_columns,
    within,
)
from dprelease.mechanism.margins._levels import (
    LevelLaws,
    MarginAccuracy,
    Outcome,
    level_sums,
    margin_accuracy,
    release_levels,
    rounded_counts,
)
from dprelease.mechanism.margins._vector import Vector

__all__ = [
    "ROUNDING_RULE",
    "WEIGHTED_ROUNDING",
    "LevelLaws",
    "MarginAccuracy",
    "Measured",
    "Outcome",
    "Vector",
    "count_columns",
    "from_noisy",
    "level_sums",
    "margin_accuracy",
    "noise_decimals",
    "places_of",
    "published_decimals",
    "release_levels",
    "round_to",
    "rounded_counts",
    "value_columns",
    "within",
]
