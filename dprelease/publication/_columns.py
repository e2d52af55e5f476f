"""The released value columns as publication sees them: per value, its margin columns, its
flag column and the public facts of its statistic (kind, bounds, whether it counts rows).

This is the one place that reads the statistic kinds of the spec; everything else in
`publication` works on these descriptors and the released table.
"""

from __future__ import annotations

from dataclasses import dataclass

from dprelease.spec import (
    COMBINED_SUFFIX,
    FLAG_SUFFIX,
    HIGH_SUFFIX,
    LOW_SUFFIX,
    MOE95_SUFFIX,
    CountStatistic,
    MeanStatistic,
    QuantileStatistic,
    ReleaseSpec,
    SumStatistic,
)


@dataclass(frozen=True)
class ValueColumn:
    """One released value column (a quantile has one per p) and what belongs to it."""

    statistic: str
    kind: str  # count, sum, mean, quantile, median
    column: str
    moe: str | None  # `<column>_moe95`, if released
    low: str | None  # a quantile's interval
    high: str | None
    combined: str | None  # `<statistic>_moe95_combined`, with a sampling input
    counts_rows: bool  # an unweighted count: integer values, integer truth
    weighted: bool
    lower: float | None
    upper: float | None

    @property
    def flag(self) -> str:
        return f"{self.column}{FLAG_SUFFIX}"

    @property
    def rounds(self) -> bool:
        """Whether a rounding base applies: counts and sums (values that add up over cells)."""
        return self.kind in ("count", "sum")

    @property
    def margins(self) -> tuple[str, ...]:
        """Every column that states this value's uncertainty (blanked with it)."""
        return tuple(c for c in (self.moe, self.combined, self.low, self.high) if c is not None)


def value_columns(spec: ReleaseSpec) -> list[ValueColumn]:
    """Every released value column of `spec`, in table order."""
    post = spec.postprocess
    sampled = set(spec.sampling or {})
    found = []
    for stat in spec.statistics:
        weighted = spec.survey_weight_of(stat) is not None
        if isinstance(stat, QuantileStatistic):
            for column in stat.value_columns():
                found.append(
                    ValueColumn(
                        stat.name,
                        stat.kind.value,
                        column,
                        None,
                        f"{column}{LOW_SUFFIX}",
                        f"{column}{HIGH_SUFFIX}",
                        None,
                        False,
                        False,
                        stat.lower,
                        stat.upper,
                    )
                )
            continue
        bounded = isinstance(stat, SumStatistic | MeanStatistic)
        found.append(
            ValueColumn(
                stat.name,
                stat.kind.value,
                stat.name,
                f"{stat.name}{MOE95_SUFFIX}" if post.moe95_columns else None,
                None,
                None,
                f"{stat.name}{COMBINED_SUFFIX}" if stat.name in sampled else None,
                isinstance(stat, CountStatistic) and not weighted,
                weighted,
                stat.lower if bounded else None,  # type: ignore[union-attr]
                stat.upper if bounded else None,  # type: ignore[union-attr]
            )
        )
    return found
