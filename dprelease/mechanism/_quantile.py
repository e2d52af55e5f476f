"""Exact DP quantiles of a bounded column, per cell of the key grid, each with a 95% interval.

What goes in: per cell, the histogram of the column's clamped values on a public grid of B
points (`QuantileGrid`: lower, lower + resolution, …, upper), as the engine counts it after
bounding each unit's contribution. What comes out: for each requested p, the released grid
point of every cell and an interval of grid points that holds the cell's true p-quantile with
probability ≥ 95%. The target is the value of rank ⌈p·n⌉ among the cell's n discretized values.

How, and why (docs/quantiles.md has the measurements behind the choice):

* The value is chosen by **permute-and-flip** (McKenna & Sheldon 2020) over the B grid points
  with the *rank distance* score S(k) = distance of p·n from the ranks grid point k holds,
  [#{x < k}, #{x ≤ k}]. Permute-and-flip is never worse than the exponential mechanism and
  needs only Bernoulli(exp(−S/scale)) draws. A draw is [G ≥ S] with G geometric,
  P(G ≥ s) = exp(−s/scale), which we take from one exact discrete Laplace draw (G = Z for Z ≥ 0,
  −Z − 1 otherwise), so the work is B draws per cell whatever the data. Drawing every bin's
  coin at once and taking a uniform accepted bin is exactly permute-and-flip: the first
  accepted bin of a uniform random order is uniform among the accepted ones.
  Measured against a hierarchical histogram (a noisy tree over the bins, one measurement for
  every p), this is 5–20× more accurate in ranks at every n and ε tried, even with ε split
  over three p's.
* The **interval** costs a share of ε (`interval_share`): the score says nothing about how many
  rows sit near the released point, so no post-processing of the value alone can give an
  honest interval in the column's units. With probability ≥ 97.5% the released point k̂ is
  within T ranks of p·n (T is data-free). A second permute-and-flip on each side of k̂ then
  finds a grid point at least T ranks away: above k̂ it scores the rows in (k̂, j] against a
  public target rank t' (and mirrored below). The two sides see disjoint rows, so together they
  cost that share once (parallel composition); each side's target is padded with t' public rows
  at the domain's end, so it always exists. Coverage ≥ 1 − 2.5% − 2.5% by a union bound.
* **Several p's** split ε equally; the values are then sorted across p (a rearrangement,
  which never increases the error) and the intervals widened to be monotone too.

Privacy: one unit's change (`rows_moved` rows, removed plus added, over all cells) moves a
value score by at most max(a, d − a)·rows_moved (p = a/d, scores kept in units of 1/d rank)
and an interval score by at most rows_moved ranks; sampling at scale 2·Δ/ε makes each
mechanism ε-DP. Everything is integer arithmetic on counts; random bits come only from the
NoiseSource, and how many are drawn depends on the public grid and the number of cells.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dprelease.errors import NoiseError, SpecError
from dprelease.noise import (
    NoiseSource,
    _BitStream,
    default_noise_source,
    discrete_laplace,
    exact_scale,
)
from dprelease.profile import Neighbours

__all__ = [
    "DEFAULT_INTERVAL_SHARE",
    "QuantileGrid",
    "QuantilePlan",
    "QuantileRelease",
    "plan_quantiles",
    "release_quantiles",
]

#: Share of each p's ε spent on its interval; the rest chooses the value. A quarter keeps the
#: value within ~4/3 of the error it would have with the whole share (docs/quantiles.md).
DEFAULT_INTERVAL_SHARE = Fraction(1, 4)
#: The interval misses with probability ≤ 5%: 2.5% that the value is further than T ranks from
#: p·n, plus 2.5% that the interval's end on the side of the true quantile falls short.
VALUE_MISS = 0.025
END_MISS = 0.025
#: Grid sizes and p denominators up to 2^20 and per-cell cumulative counts saturated at 2^40
#: keep every score d·count below 2^60 in int64. Saturation is 1-Lipschitz, so the sensitivity
#: bound still holds; it only ever touches cells of more than 10^12 rows.
MAX_BINS = 1 << 20
MAX_P_DENOMINATOR = 1 << 20
_COUNT_CAP = 1 << 40
#: Cells per batch: about 2^20 grid points in flight, whatever the number of cells.
_BATCH_POINTS = 1 << 20


@dataclass(frozen=True)
class QuantileGrid:
    """The public grid a column is discretized to: B points lower + k·resolution, k < B.

    An engine clamps each value to [lower, upper] and rounds it to the nearest grid point
    (halves up); `discretize` is that rule, for tests and benchmarks. A released grid point is
    then within resolution/2 of the clamped column's own quantile.
    """

    lower: Fraction
    resolution: Fraction
    bins: int

    @classmethod
    def from_bounds(
        cls, lower: Fraction | int, upper: Fraction | int, resolution: Fraction | int
    ) -> QuantileGrid:
        lo, hi, res = Fraction(lower), Fraction(upper), Fraction(resolution)
        if res <= 0:
            raise SpecError("resolution", "must be positive")
        if hi <= lo:
            raise SpecError("upper", "must be above lower")
        steps = (hi - lo) / res
        if steps.denominator != 1:
            raise SpecError(
                "resolution", "must divide upper − lower, so both bounds are grid points"
            )
        bins = int(steps) + 1
        if bins > MAX_BINS:
            raise SpecError(
                "resolution", f"gives {bins} grid points; at most {MAX_BINS}: make it coarser"
            )
        return cls(lo, res, bins)

    @property
    def upper(self) -> Fraction:
        return self.lower + (self.bins - 1) * self.resolution

    def values(self, points: ArrayLike) -> NDArray[np.float64]:
        """Grid point indices → values in the column's units."""
        return float(self.lower) + np.asarray(points, dtype=np.float64) * float(self.resolution)

    def discretize(self, column: ArrayLike) -> NDArray[np.int64]:
        """Values → grid point indices: clamp to the bounds, round to the nearest point."""
        x = np.clip(np.asarray(column, dtype=np.float64), float(self.lower), float(self.upper))
        points = np.floor((x - float(self.lower)) / float(self.resolution) + 0.5)
        return np.clip(points, 0, self.bins - 1).astype(np.int64)


@dataclass(frozen=True)
class QuantilePlan:
    """Everything a quantile release will do and state, from public settings only.

    Per p: the ε that picks the value and the ε that finds its interval, the exact sampling
    scales, and the data-free accuracy statement `rank_error95` (ranks: the released value's
    rank is within p·n ± that with probability ≥ 95%). In the column's units the error is that
    many ranks times the spacing of the cell's values near the quantile (plus resolution/2),
    so only the released interval can say it per cell.
    """

    ps: tuple[Fraction, ...]
    bins: int
    rows_moved: int
    epsilon: Fraction
    value_epsilon: Fraction  # per p
    interval_epsilon: Fraction  # per p
    value_scales: tuple[Fraction, ...]  # geometric scale per p, in units of 1/d rank
    interval_scale: Fraction  # geometric scale of the interval's ends, in ranks

    @property
    def value_score_sensitivity(self) -> tuple[int, ...]:
        """Δ of each p's value score (units of 1/d rank): max(a, d − a)·rows_moved."""
        return tuple(
            max(p.numerator, p.denominator - p.numerator) * self.rows_moved for p in self.ps
        )

    @property
    def interval_score_sensitivity(self) -> int:
        """Δ of an interval end's score, in ranks."""
        return self.rows_moved

    def value_rank_bound(self, miss: float) -> tuple[float, ...]:
        """T per p: P(the released value is more than T ranks from p·n) ≤ miss, for any data.

        Permute-and-flip outputs a grid point only if its coin came up, so
        P(score ≥ x) ≤ Σ over the ≤ B − 1 points scoring ≥ x of exp(−x/scale).
        """
        if self.bins == 1:
            return tuple(0.0 for _ in self.ps)
        log_term = math.log((self.bins - 1) / miss)
        return tuple(
            float(scale) * log_term / p.denominator
            for p, scale in zip(self.ps, self.value_scales, strict=True)
        )

    @property
    def rank_error95(self) -> tuple[float, ...]:
        """The planning statement: 95% rank error of each released value (data-free)."""
        return self.value_rank_bound(0.05)

    @property
    def interval_targets(self) -> tuple[int, ...]:
        """t' per p: the rank, counted away from the released point, each interval end aims at.

        An end whose score is at most Y holds ≥ t' − Y ranks; t' − Y = ⌊T⌋ + 1 more than the
        value can miss by (with probability 97.5% each), which is what coverage needs.
        """
        slack = self._end_slack()
        return tuple(math.floor(t) + 1 + slack for t in self.value_rank_bound(VALUE_MISS))

    @property
    def interval_rank_reach95(self) -> tuple[int, ...]:
        """How far (ranks) past the released point each end of the interval lies, at most, with
        probability ≥ 97.5%: t' plus the end's own error."""
        slack = self._end_slack()
        return tuple(t + slack for t in self.interval_targets)

    def _end_slack(self) -> int:
        """Y: an interval end's score exceeds Y with probability ≤ END_MISS."""
        if self.bins == 1:
            return 0
        return max(
            0, math.ceil(float(self.interval_scale) * math.log((self.bins - 1) / END_MISS)) - 1
        )


@dataclass(frozen=True)
class QuantileRelease:
    """Released grid point indices, [cells × len(plan.ps)], monotone in p within a cell, and
    the 95% interval of each: low ≤ value ≤ high. `plan.grid`-free: map with QuantileGrid."""

    plan: QuantilePlan
    values: NDArray[np.int64]
    low: NDArray[np.int64]
    high: NDArray[np.int64]


def _as_fraction(x: Fraction | int | str, what: str) -> Fraction:
    if isinstance(x, bool) or not isinstance(x, numbers.Rational | str):
        raise SpecError(what, f"must be an exact rational (int, Fraction or '1/4'), got {x!r}")
    try:
        return Fraction(x)
    except (ValueError, ZeroDivisionError) as exc:
        raise SpecError(what, f"is not a rational number: {x!r}") from exc


def plan_quantiles(
    ps: list[Fraction | int | str] | tuple[Fraction | int | str, ...],
    epsilon: Fraction | int | str,
    bins: int,
    rows_per_unit: int,
    neighbours: Neighbours,
    interval_share: Fraction = DEFAULT_INTERVAL_SHARE,
) -> QuantilePlan:
    """The plan of a quantile statistic at ε: budget per p, exact scales, accuracy. No data.

    `rows_per_unit` is R, the rows a unit keeps. The quantile sees where rows are, not only how
    many, so a substitution moves 2R rows (removed and added) even in an ungrouped release.
    """
    eps = _as_fraction(epsilon, "epsilon")
    if eps <= 0:
        raise SpecError("epsilon", "must be positive")
    fractions = sorted(_as_fraction(p, "quantiles") for p in ps)
    if not fractions:
        raise SpecError("quantiles", "name at least one p")
    if len(set(fractions)) != len(fractions):
        raise SpecError("quantiles", "each p may appear once")
    for p in fractions:
        if not 0 < p < 1:
            raise SpecError("quantiles", f"p = {p} is not strictly between 0 and 1")
        if p.denominator > MAX_P_DENOMINATOR:
            raise SpecError("quantiles", f"p = {p}: use a denominator of at most 2^20")
    if isinstance(bins, bool) or not isinstance(bins, int) or not 1 <= bins <= MAX_BINS:
        raise SpecError("resolution", f"the grid must have 1 to {MAX_BINS} points")
    if isinstance(rows_per_unit, bool) or not isinstance(rows_per_unit, int) or rows_per_unit < 1:
        raise SpecError("max_rows_per_unit", "must be a positive integer")
    share = Fraction(interval_share)
    if not 0 < share < 1:
        raise SpecError("interval_share", "must be strictly between 0 and 1")
    rows_moved = rows_per_unit * (1 if neighbours is Neighbours.ADD_REMOVE else 2)
    per_p = eps / len(fractions)
    interval_eps = per_p * share
    value_eps = per_p - interval_eps
    value_scales = tuple(
        exact_scale(2 * max(p.numerator, p.denominator - p.numerator) * rows_moved / value_eps)
        for p in fractions
    )
    return QuantilePlan(
        ps=tuple(fractions),
        bins=bins,
        rows_moved=rows_moved,
        epsilon=eps,
        value_epsilon=value_eps,
        interval_epsilon=interval_eps,
        value_scales=value_scales,
        interval_scale=exact_scale(Fraction(2 * rows_moved) / interval_eps),
    )


# --------------------------------------------------------------------------- scores


def _cumulative(histograms: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(below, upto): #{x < k} and #{x ≤ k} per grid point, saturated at 2^40."""
    upto = np.minimum(np.cumsum(np.minimum(histograms, _COUNT_CAP), axis=1), _COUNT_CAP)
    below = np.empty_like(upto)
    below[:, 0] = 0
    below[:, 1:] = upto[:, :-1]
    return below, upto


def _value_scores(
    below: NDArray[np.int64], upto: NDArray[np.int64], p: Fraction
) -> NDArray[np.int64]:
    """d × the distance of p·n from [below, upto] (0 where the point holds rank p·n)."""
    a, d = p.numerator, p.denominator
    target = a * upto[:, -1:]
    return np.maximum(0, np.maximum(d * below - target, target - d * upto))


def _end_scores(
    below: NDArray[np.int64], upto: NDArray[np.int64], value: NDArray[np.int64], target: int
) -> NDArray[np.int64]:
    """Scores of the interval's ends, on both sides of each cell's released point `value`.

    Above it, point j holds ranks (rows in (value, j)) … (rows in (value, j]); below it, counted
    downwards, (rows in (j, value)) … (rows in [j, value)). The score is the distance of
    `target` from that range. The domain's end points count `target` extra public rows, so a
    point of score 0 always exists. The score at `value` itself is unused.
    """
    column = value[:, None]
    upto_v = np.take_along_axis(upto, column, axis=1)
    below_v = np.take_along_axis(below, column, axis=1)
    points = np.arange(below.shape[1])
    above = points > column
    lo_rank = np.where(above, below - upto_v, below_v - upto)
    hi_rank = np.where(above, upto - upto_v, below_v - below)
    hi_rank[:, -1] += target
    hi_rank[:, 0] += target
    return np.maximum(0, np.maximum(lo_rank - target, target - hi_rank))


# --------------------------------------------------------------------------- sampling


def _coins(scores: NDArray[np.int64], scale: Fraction, source: NoiseSource) -> NDArray[np.bool_]:
    """Independent Bernoulli(exp(−score/scale)) per entry, as [G ≥ score] with G geometric.

    A discrete Laplace Z with P(Z = z) ∝ q^|z| folds into G = Z (Z ≥ 0) or −Z − 1 (Z < 0) with
    P(G = g) = (1 − q)q^g, so P(G ≥ s) = q^s = exp(−s/scale). The number of draws is the
    array's size, never a function of the scores.
    """
    z = discrete_laplace(scale, scores.size, source).reshape(scores.shape)
    geometric = np.where(z >= 0, z, -z - 1)
    return geometric >= scores


def _uniform_below(stream: _BitStream | None, m: NDArray[np.int64]) -> NDArray[np.int64]:
    """One uniform integer in [0, m_i) per entry (m_i ≥ 1), by exact rejection on 64-bit words.

    A word is redrawn with probability < m_i/2^64 < 2^-43: the only place the number of bits
    drawn depends on the accepted counts, and never in practice. The zero test source gives 0.
    """
    if stream is None:
        return np.zeros(m.size, dtype=np.int64)
    mod = m.astype(np.uint64)
    reject_from = np.uint64(0) - (np.uint64(0) - mod) % mod  # 2^64 − (2^64 mod m), wraps to 0
    words = stream.words(m.size, np.uint64).copy()
    bad = np.flatnonzero((reject_from != 0) & (words >= reject_from))
    while bad.size:
        words[bad] = stream.words(bad.size, np.uint64)
        bad = bad[(reject_from[bad] != 0) & (words[bad] >= reject_from[bad])]
    return (words % mod).astype(np.int64)


def _pick_uniform(
    accepted: NDArray[np.bool_], stream: _BitStream | None, fallback: NDArray[np.int64]
) -> NDArray[np.int64]:
    """Per row, a uniformly random accepted column; `fallback` where the row accepts none."""
    counts = accepted.sum(axis=1)
    rank = _uniform_below(stream, np.maximum(counts, 1))
    position = np.argmax(np.cumsum(accepted, axis=1) > rank[:, None], axis=1)
    return np.where(counts > 0, position, fallback)


def _open_stream(source: NoiseSource, cells: int) -> _BitStream | None:
    if source._open_stream is None:
        return None
    return _BitStream(source._open_stream(), 16 * cells)


def _release_batch(
    histograms: NDArray[np.int64], plan: QuantilePlan, source: NoiseSource
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    cells, bins = histograms.shape
    below, upto = _cumulative(histograms)
    points = np.arange(bins)
    shape = (cells, len(plan.ps))
    values, low, high = (np.empty(shape, dtype=np.int64) for _ in range(3))
    for i, (p, scale, target) in enumerate(
        zip(plan.ps, plan.value_scales, plan.interval_targets, strict=True)
    ):
        stream = _open_stream(source, cells)
        # Some point always scores 0 (it holds rank p·n), so every row accepts one.
        value = _pick_uniform(
            _coins(_value_scores(below, upto, p), scale, source), stream, points[:1]
        )
        coins = _coins(_end_scores(below, upto, value, target), plan.interval_scale, source)
        column = value[:, None]
        high[:, i] = _pick_uniform(coins & (points > column), stream, value)
        low[:, i] = _pick_uniform(coins & (points < column), stream, value)
        values[:, i] = value
    # Monotone in p: sort the values; widen the intervals to a running min/max, which keeps
    # each interval's coverage (it only grows) and keeps low ≤ value ≤ high after sorting.
    values.sort(axis=1)
    low = np.minimum.accumulate(low[:, ::-1], axis=1)[:, ::-1]
    high = np.maximum.accumulate(high, axis=1)
    return values, low, high


def release_quantiles(
    histograms: ArrayLike, plan: QuantilePlan, source: NoiseSource | None = None
) -> QuantileRelease:
    """Release every p of `plan` for every cell: values and 95% intervals, as grid indices.

    `histograms` is [cells × plan.bins] of non-negative integer counts. The cells are done in
    batches of about 2^20 grid points, so memory stays bounded and the bits drawn depend only
    on the number of cells and the plan.
    """
    counts = np.asarray(histograms)
    if counts.ndim != 2 or counts.shape[1] != plan.bins:
        raise NoiseError(f"histograms must be [cells × {plan.bins}], got shape {counts.shape}")
    if not np.issubdtype(counts.dtype, np.integer):
        raise NoiseError("histograms must hold integer counts")
    # A negative count is an engine bug, not data: refusing it says nothing about the rows.
    if counts.size and counts.min() < 0:
        raise NoiseError("histograms must not hold negative counts")
    src = default_noise_source() if source is None else source
    cells = counts.shape[0]
    batch = max(1, _BATCH_POINTS // plan.bins)
    parts = [
        _release_batch(counts[start : start + batch].astype(np.int64), plan, src)
        for start in range(0, cells, batch)
    ]
    empty = np.empty((0, len(plan.ps)), dtype=np.int64)
    values, low, high = (
        np.concatenate([part[j] for part in parts]) if parts else empty for j in range(3)
    )
    return QuantileRelease(plan=plan, values=values, low=low, high=high)
