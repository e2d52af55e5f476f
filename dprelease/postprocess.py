"""Post-processing: noisy integer measurements → the released columns.

Everything here reads only the noisy values and public parameters, so by DP's post-processing
property it costs no ε: clamping counts at 0, scaling sums by their granularity, dividing a
mean's noisy sum by its noisy count, and rounding to the precision the noise leaves.

Rounding rule (unless `postprocess.decimals` is set): a sum is rounded to the decimal place of
the second significant digit of its 95% margin of error (a margin of 2,996 rounds to hundreds,
0.0456 to thousandths), since the digits beyond are noise; a mean likewise, per cell, by its own
margin. Margin columns are rounded *up* to the same place, so a margin is never understated;
counts are integers. The manifest states the places used.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from dprelease.accounting import StatisticPlan
from dprelease.spec import (
    MOE95_SUFFIX,
    UNDEFINED_SUFFIX,
    CountStatistic,
    PostProcessing,
    SumStatistic,
)

_INT64 = (-(2**63), 2**63 - 1)
#: The default rounding, as the manifest states it.
ROUNDING_RULE = (
    "counts are integers; sums and means are rounded to the decimal place of the second "
    "significant digit of their 95% margin of error (means per cell), unless 'decimals' is set; "
    "margins of error are rounded up to the same place"
)


def noise_decimals(moe95: float) -> int | None:
    """Decimal place of the second significant digit of a margin of error (negative: tens,
    hundreds, …); None for a zero margin, which leaves every digit."""
    if not moe95 > 0:
        return None
    return 1 - math.floor(math.log10(moe95))


def _round(values: np.ndarray, places: np.ndarray, up: bool = False) -> np.ndarray:
    """`values` rounded to `places` decimals each (negative: tens, hundreds, …; NaN: as is).

    In numpy, dividing by an exact power of ten, so 3734 / 10 gives the float printed 373.4
    (an optimizer's multiplication by 0.1 would not)."""
    to_int = np.ceil if up else np.rint  # rint: half to even
    known = np.isfinite(places)
    power = 10.0 ** np.abs(np.where(known, places, 0))  # exact for the places that occur
    rounded = np.where(places >= 0, to_int(values * power) / power, to_int(values / power) * power)
    return np.where(known, rounded, values)


def _places(post: PostProcessing, moe95: np.ndarray) -> np.ndarray:
    """Per cell, the places to round to: `decimals` if set, else the rounding rule's."""
    if post.decimals is not None:
        return np.full(moe95.shape, float(post.decimals))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(moe95 > 0, 1 - np.floor(np.log10(moe95)), np.nan)


def sum_decimals(p: StatisticPlan, post: PostProcessing) -> int | None:
    """The decimal places a sum is published with (see the module's rounding rule)."""
    return post.decimals if post.decimals is not None else noise_decimals(p.measurement.moe95)


def columns(p: StatisticPlan, noisy: dict[str, pl.Series], post: PostProcessing) -> list[pl.Series]:
    """The released columns of one statistic, from the noisy integer measurements."""
    stat, m = p.statistic, p.measurement
    margin = f"{stat.name}{MOE95_SUFFIX}"
    cells = len(noisy[m.name])
    if isinstance(stat, CountStatistic):
        lowest = 0 if post.nonnegative else _INT64[0]
        values = noisy[m.name].clip(lowest, _INT64[1]).cast(pl.Int64).alias(stat.name)
        if not post.moe95_columns:
            return [values]
        return [values, pl.Series(margin, [m.moe95] * cells, dtype=pl.Float64)]
    total = noisy[m.name].cast(pl.Float64).to_numpy() * float(m.granularity)
    if isinstance(stat, SumStatistic):
        if post.nonnegative and stat.lower >= 0:
            total = np.maximum(total, 0.0)
        moe = np.full(cells, m.moe95)
        places = _places(post, moe)
        out = [pl.Series(stat.name, _round(total, places), dtype=pl.Float64)]
        if post.moe95_columns:
            out.append(pl.Series(margin, _round(moe, places, up=True), dtype=pl.Float64))
        return out
    return _mean(p, total, noisy, post)


def _mean(
    p: StatisticPlan, total: np.ndarray, noisy: dict[str, pl.Series], post: PostProcessing
) -> list[pl.Series]:
    """Noisy sum / noisy count, clamped to the bounds; null (and flagged) where the noisy count
    is ≤ 0, since no mean is defined there (the bounds' midpoint would only look like data)."""
    stat, m, count_m = p.statistic, p.measurement, p.count
    assert count_m is not None and not isinstance(stat, CountStatistic)  # a mean's denominator
    count = noisy[count_m.name].cast(pl.Float64).to_numpy()
    defined = count > 0
    safe = np.where(defined, count, 1.0)
    mean = np.clip(total / safe, stat.lower, stat.upper)
    # first-order propagation of the sum's and the count's margins through sum / count
    moe = (m.moe95 + np.abs(mean) * count_m.moe95) / safe
    places = _places(post, moe)
    out = [pl.Series(stat.name, np.where(defined, _round(mean, places), np.nan))]
    if post.moe95_columns:
        margin = np.where(defined, _round(moe, places, up=True), np.nan)
        out.append(pl.Series(f"{stat.name}{MOE95_SUFFIX}", margin))
    out = [series.fill_nan(None) for series in out]
    return [*out, pl.Series(f"{stat.name}{UNDEFINED_SUFFIX}", ~defined)]
