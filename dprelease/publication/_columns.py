"""The released value columns as publication sees them: per value, its margin columns, its
flag column and the public facts of its statistic (kind, bounds, whether it counts rows).

This is the one place that reads the spec's statistics, through their kinds' hooks (never
which class they are); everything else in `publication` works on these descriptors and the
released table.
"""

from __future__ import annotations

from dataclasses import dataclass

from dprelease.spec import (
    COMBINED_SUFFIX,
    FLAG_SUFFIX,
    HIGH_SUFFIX,
    LOW_SUFFIX,
    MOE95_SUFFIX,
    PublishedAs,
    ReleaseSpec,
)


@dataclass(frozen=True)
class ValueColumn:
    """One released value column (a quantile has one per p) and what belongs to it."""

    statistic: str
    published_as: PublishedAs  # what publication may do with it (its kind's hook)
    provides: str | None  # "count", "sum": what its own measurement is (its kind's hook)
    column: str
    moe: str | None  # `<column>_moe95`, if released
    low: str | None  # a quantile's interval
    high: str | None
    combined: str | None  # `<statistic>_moe95_combined`, with a sampling input
    counts_rows: bool  # an unweighted count: integer values, integer truth
    weighted: bool
    lower: float | None  # the bounds of each row's value, where its kind has some
    upper: float | None

    @property
    def flag(self) -> str:
        return f"{self.column}{FLAG_SUFFIX}"

    @property
    def rounds(self) -> bool:
        """Whether a rounding base applies: values that add up over cells (counts, sums)."""
        return self.published_as is PublishedAs.TOTAL

    @property
    def margins(self) -> tuple[str, ...]:
        """Every column that states this value's uncertainty (blanked with it)."""
        return tuple(c for c in (self.moe, self.combined, self.low, self.high) if c is not None)


def value_columns(spec: ReleaseSpec) -> list[ValueColumn]:
    """Every released value column of `spec`, in table order, described by its kind's hooks
    (`published_columns`, `provides`, `element_bounds`, `randomized`)."""
    post = spec.postprocess
    sampled = set(spec.sampling or {})
    found = []
    for stat in spec.statistics:
        weighted = spec.survey_weight_of(stat) is not None
        lower, upper = stat.element_bounds() or (None, None)
        # integer values with an integer truth: counts of rows, and of randomized answers
        counts = (stat.provides == "count" and not weighted) or stat.randomized
        for column, published_as in stat.published_columns():
            ranked = published_as is PublishedAs.RANK
            found.append(
                ValueColumn(
                    statistic=stat.name,
                    published_as=published_as,
                    provides=stat.provides,
                    column=column,
                    moe=None if ranked or not post.moe95_columns else f"{column}{MOE95_SUFFIX}",
                    low=f"{column}{LOW_SUFFIX}" if ranked else None,
                    high=f"{column}{HIGH_SUFFIX}" if ranked else None,
                    combined=f"{stat.name}{COMBINED_SUFFIX}" if stat.name in sampled else None,
                    counts_rows=counts and published_as is PublishedAs.TOTAL,
                    weighted=weighted,
                    lower=lower,
                    upper=upper,
                )
            )
    return found
