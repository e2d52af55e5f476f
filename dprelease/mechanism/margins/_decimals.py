"""Post-processing of noisy integer vectors: from noisy units to released values, and the
rounding rule every kind publishes with.

Everything here reads only the noisy values and public parameters, so by DP's post-processing
property it costs no ε: clamping counts at 0, scaling sums by their granularity, and rounding to
the precision the noise leaves (each kind's module applies it to its own columns).

Rounding rule (unless `postprocess.decimals` is set): a sum is rounded to the decimal place of
the second significant digit of its 95% margin of error (a margin of 2,996 rounds to hundreds,
0.0456 to thousandths), since the digits beyond are noise; a mean likewise, per cell, by its own
margin. Margin columns are rounded *up* to the same place, so a margin is never understated;
counts of rows are integers (weighted counts are rounded as sums are). The manifest states the
places used.

A mean also knows where its truth lies: in [lower, upper], a mean of clamped values. So it is
rounded to a place no coarser than that width allows and never past a bound, and its margin is
never more than the distance to the farther bound, which holds the truth for sure (not only
at 95%). A cell whose margin reaches that far says nothing the bounds did not: its mean ±
margin covers the whole range, and `<mean>_uninformative` is true there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from dprelease.mechanism.margins._vector import Vector
from dprelease.spec import MOE95_SUFFIX, PostProcessing

_INT64 = (-(2**63), 2**63 - 1)
#: A decimal computed in floats (a bound, a published value, a difference of them) within this
#: relative distance of a multiple of its rounding place stands for that multiple: their binary
#: noise (0.3 − 0.1 is 0.19999999999999998) is some 1e-16, as in the controlled rounding.
_SNAP = 1e-9
#: 10^k for every place a float can have, looked up per cell (a power per cell costs more than
#: the rounding); exact for the places that occur (k ≤ 22).
_POWERS_OF_TEN = 10.0 ** np.arange(309)
#: The default rounding, as the manifest states it.
ROUNDING_RULE = (
    "counts are integers; sums and means are rounded to the decimal place of the second "
    "significant digit of their 95% margin of error (means per cell), unless 'decimals' is set; "
    "margins of error are rounded up to the same place"
)
#: What the rule adds for a release with a survey-weighted statistic.
WEIGHTED_ROUNDING = "; weighted counts (sums of weights) are rounded as sums are"


def noise_decimals(moe95: float) -> int | None:
    """Decimal place of the second significant digit of a margin of error (negative: tens,
    hundreds, …); None for a zero margin, which leaves every digit."""
    if not moe95 > 0:
        return None
    return 1 - math.floor(math.log10(moe95))


def round_to(
    values: np.ndarray,
    places: np.ndarray,
    up: bool = False,
    down: bool = False,
    decimal: bool = False,
) -> np.ndarray:
    """`values` rounded to `places` decimals each (negative: tens, hundreds, …; NaN: as is),
    to the nearest (half to even), or `up` or `down`. With `decimal`, `values` are decimals
    (bounds, differences of bounds and published values) whose binary noise must not move them
    past a multiple of the place: 0.14 × 100 is 14.000000000000002, still 14 rounded up.

    In numpy, dividing by an exact power of ten, so 3734 / 10 gives the float printed 373.4
    (an optimizer's multiplication by 0.1 would not)."""
    to_int = np.ceil if up else np.floor if down else np.rint
    known = np.isfinite(places)
    power = _POWERS_OF_TEN[np.abs(np.where(known, places, 0)).astype(np.int64).clip(0, 308)]
    scaled = np.where(places >= 0, values * power, values / power)
    if decimal:  # within 1e-9 (relative) of a multiple of the place: that multiple
        nearest = np.rint(scaled)
        snap = np.abs(scaled - nearest) <= _SNAP * np.maximum(1.0, np.abs(scaled))
        scaled = np.where(snap, nearest, scaled)
    rounded = np.where(places >= 0, to_int(scaled) / power, to_int(scaled) * power)
    return np.where(known, rounded, values)


def places_of(post: PostProcessing, moe95: np.ndarray) -> np.ndarray:
    """Per cell, the places to round to: `decimals` if set, else the rounding rule's."""
    if post.decimals is not None:
        return np.full(moe95.shape, float(post.decimals))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(moe95 > 0, 1 - np.floor(np.log10(moe95)), np.nan)


@dataclass(frozen=True)
class Measured:
    """A measurement as the released columns read it: its value on every row of the table and
    that value's 95% margin of error. Counts are integers; sums are in value units and are
    published rounded to `places` decimals per row."""

    values: pl.Series  # counts: an integer dtype; sums: Float64
    moe95: np.ndarray
    places: np.ndarray | None = None  # sums only


def from_noisy(
    measurements: Sequence[Vector], noisy: Mapping[str, pl.Series], post: PostProcessing
) -> dict[str, Measured]:
    """Without margins: each measurement's noisy cells (integer units) as released. With
    `nonnegative`, counts (weighted or not), and sums whose values cannot be negative, are
    clamped at 0: the truth is ≥ 0, so this never moves a value further from it."""
    measured = {}
    for m in measurements:
        cells = noisy[m.name]
        moe = np.full(len(cells), m.moe95)
        if m.counts_rows:
            lowest = 0 if post.nonnegative else _INT64[0]
            measured[m.name] = Measured(cells.clip(lowest, _INT64[1]), moe)
            continue
        total = cells.cast(pl.Float64).to_numpy() * float(m.granularity)
        if post.nonnegative and m.nonnegative_values:
            total = np.maximum(total, 0.0)
        measured[m.name] = Measured(pl.Series(total), moe, places_of(post, moe))
    return measured


def within(values: np.ndarray, places: np.ndarray, lower: float, upper: float) -> np.ndarray:
    """`values` (in [lower, upper]) rounded to `places` and kept inside the bounds: a value
    rounded past a bound goes to the nearest multiple of the place inside it (99 rounded to
    the tens of [18, 99] is 90, not 100), or to the bound itself where none fits.

    The multiples nearest inside the bounds are worked out once per place that occurs (a few),
    not per cell."""
    rounded = round_to(values, places)
    known = np.isfinite(places)
    if not known.any():  # no place (zero margins): every digit kept, already within the bounds
        return rounded
    first = int(places[known].min())
    each = np.arange(first, int(places[known].max()) + 1, dtype=float)
    inner_lower = round_to(np.full(each.shape, lower), each, up=True, decimal=True)
    inner_upper = round_to(np.full(each.shape, upper), each, down=True, decimal=True)
    fits = inner_lower <= inner_upper
    low, high = np.where(fits, inner_lower, lower), np.where(fits, inner_upper, upper)
    at = np.where(known, places - first, 0).astype(np.int64)
    return np.where(known, np.clip(rounded, low[at], high[at]), rounded)


def value_columns(name: str, got: Measured, post: PostProcessing) -> list[pl.Series]:
    """A sum's (or weighted count's) released columns: its value rounded to its places and its
    margin of error rounded up to the same place (a value without places keeps every digit)."""
    places = got.places if got.places is not None else np.full(len(got.moe95), np.nan)
    out = [pl.Series(name, round_to(got.values.to_numpy(), places), dtype=pl.Float64)]
    if post.moe95_columns:
        margin = round_to(got.moe95, places, up=True)
        out.append(pl.Series(f"{name}{MOE95_SUFFIX}", margin, dtype=pl.Float64))
    return out


def count_columns(name: str, got: Measured, post: PostProcessing) -> list[pl.Series]:
    """A count of rows' released columns: integers, and its margin of error."""
    values = got.values.cast(pl.Int64).alias(name)
    if not post.moe95_columns:
        return [values]
    return [values, pl.Series(f"{name}{MOE95_SUFFIX}", got.moe95, dtype=pl.Float64)]


def published_decimals(moe95: float, post: PostProcessing) -> int | None:
    """The decimal places a value without margins is published with (the rounding rule)."""
    return post.decimals if post.decimals is not None else noise_decimals(moe95)
