"""Exact DP quantiles of a bounded column, per cell of the key grid, each with a 95% interval.

What goes in: per cell, the histogram of the column's clamped values on a public grid of B
points (`QuantileGrid`: lower, lower + resolution, …, upper), as the engine counts it after
bounding each unit's contribution. What comes out: for each requested p, a released grid point
per cell and an interval of grid points that holds the cell's true p-quantile (the grid point
of rank ⌈p·n⌉) with probability ≥ 95%. docs/quantiles.md has the measurements behind each
choice; in short:

* **Values: permute-and-flip** (McKenna & Sheldon 2020) over the grid with the score
  S(k) = |#{x < k} + ½·#{x = k} − p·n|: how many ranks p·n lies from grid point k, counting
  half the rows rounded to k as below it (they were spread around it before rounding). On
  unrounded data, where ties are rare, this is OpenDP's score |#{x < c} + p·#{x = c} − p·n|;
  on rounded data, counting ties at ½ rather than p halves the quartiles' mean error in a dense
  cell (measured). Permute-and-flip is never worse than the exponential mechanism and needs
  only Bernoulli(exp(−(S − S_min)/scale)) coins. A coin is [G ≥ S − S_min] with G
  geometric, P(G ≥ s) = exp(−s/scale), taken from one exact discrete Laplace draw (G = Z for
  Z ≥ 0, −Z − 1 otherwise), so every grid point costs one draw whatever the data. Flipping
  every coin at once and taking a uniform heads-up point is exactly permute-and-flip: the first
  heads of a uniformly random order is uniform among the heads.
* **Several p's: one level at a time.** The middle p is released first over the whole grid;
  the p's below it then choose only among grid points up to it, the p's above only among points
  from it, and so on (as in Kaplan, Schnapp & Stemmer 2022). A row then moves its own p's
  scores fully but another p's only by p/max(p, 1 − p) or (1 − p)/max(p, 1 − p), as all of
  that p's points lie on one side of it, so a level costs less than its p's added up
  (`level_costs`), and the values are monotone in p.
  The score keeps the global target p·n, so no p inherits another's error as bias.
* **Intervals: one noisy ladder.** A value says nothing about how many rows lie near it, so an
  honest interval in the column's units needs a measurement. After the values, every cell's
  grid is cut into blocks that double in width away from each released value; the block counts
  get exact discrete Laplace noise (one row moves one block: L1 sensitivity = rows moved) from
  a share of ε (`interval_share`). The noisy cumulative counts then bound where rank p·n lies:
  a Chernoff bound on the summed noise, union-bounded over the cuts, makes each side miss with
  probability ≤ 2.5%. The interval is widened to be monotone in p, which keeps its coverage,
  and a value outside its interval is moved to its nearest end, which can only bring it closer
  to a quantile the interval holds. All of it is post-processing of the ladder and the values.

Privacy: one unit's change moves `rows_moved` rows (removed plus added, over all cells); the
values cost `value_epsilon` in total and the ladder `interval_epsilon`. Everything is integer
arithmetic on counts; random bits come only from the NoiseSource, and how many are drawn
depends only on the number of cells and the plan (but for a redraw of probability < 2^-43 in a
uniform choice).
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

#: Share of the statistic's ε spent on the ladder that gives every p its interval.
DEFAULT_INTERVAL_SHARE = Fraction(1, 10)
#: Each side of an interval misses with probability at most this (two sides: 95%).
SIDE_MISS = 0.025
#: Grid sizes and p denominators up to 2^20 and per-cell counts saturated at 2^40 keep every
#: score below 2^62 in int64. Saturation is 1-Lipschitz, so the sensitivity bound still holds;
#: it only ever touches cells of more than 10^12 rows.
MAX_BINS = 1 << 20
MAX_P_DENOMINATOR = 1 << 20
_COUNT_CAP = 1 << 40
#: Cells per batch: about 2^20 grid points in flight, whatever the number of cells.
_BATCH_POINTS = 1 << 20


@dataclass(frozen=True)
class QuantileGrid:
    """The public grid a column is discretized to: B points lower + k·resolution, k < B.

    An engine clamps each value to [lower, upper] and rounds it to the nearest grid point
    (halves up); `discretize` is that rule, for tests and benchmarks. The released grid point
    of rank ⌈p·n⌉ is within resolution/2 of the clamped column's own quantile.
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
        """Values → grid point indices: clamp to the bounds (±inf too), round to the nearest
        point. NaN has no grid point: an engine applies its null rule before this."""
        x = np.clip(np.asarray(column, dtype=np.float64), float(self.lower), float(self.upper))
        points = np.floor((x - float(self.lower)) / float(self.resolution) + 0.5)
        return np.clip(points, 0, self.bins - 1).astype(np.int64)


def _weight_of(p: Fraction) -> int:
    """2·max(a, d − a) for p = a/d: the most one row moves p's score, in units of 1/(2d) rank
    (the unit that keeps d·(#{x < k} + #{x ≤ k}) − 2a·n an integer)."""
    return 2 * max(p.numerator, p.denominator - p.numerator)


def _row_moves(p: Fraction) -> tuple[Fraction, Fraction, Fraction]:
    """How far one row at x moves p's score at a point below x, at x, and above x, as
    fractions of the most it can move any point: 2a, |d − 2a| and 2(d − a) over 2·max(a, d − a).
    """
    a, d = p.numerator, p.denominator
    return (
        Fraction(2 * a, _weight_of(p)),
        Fraction(abs(d - 2 * a), _weight_of(p)),
        Fraction(2 * (d - a), _weight_of(p)),
    )


def _release_order(count: int) -> tuple[tuple[tuple[int, int | None, int | None], ...], ...]:
    """Levels of (p index, index bounding it below, index bounding it above), middle first."""
    levels: list[list[tuple[int, int | None, int | None]]] = []

    def split(lo: int, hi: int, below: int | None, above: int | None, depth: int) -> None:
        if lo >= hi:
            return
        mid = (lo + hi) // 2
        if len(levels) <= depth:
            levels.append([])
        levels[depth].append((mid, below, above))
        split(lo, mid, below, mid, depth + 1)
        split(mid + 1, hi, mid, above, depth + 1)

    split(0, count, None, None, 0)
    return tuple(tuple(sorted(level)) for level in levels)


def _level_cost(ps: list[Fraction]) -> Fraction:
    """The most ε-units one row spends at a level whose p's choose among consecutive ranges of
    grid points (each p's range ends where the next one's starts).

    A row at x spends a p's whole ε only if x is strictly inside that p's range, and then no
    other range holds x. Otherwise it can touch a run of ranges at their ends: the first ends at
    x (its points are below x or x), those between are x alone, the last starts at x. A range
    wholly below or above x moves by `_row_moves`' first or last fraction.
    """

    def outside(before: list[Fraction], after: list[Fraction]) -> Fraction:
        return sum((_row_moves(p)[0] for p in before), Fraction(0)) + sum(
            (_row_moves(p)[2] for p in after), Fraction(0)
        )

    worst = Fraction(0)
    for j in range(len(ps)):  # x strictly inside p_j's range
        worst = max(worst, 1 + outside(ps[:j], ps[j + 1 :]))
    for first in range(len(ps)):  # x ends ps[first]'s range … starts ps[last]'s
        for last in range(first, len(ps)):
            below, at_x, above = zip(*map(_row_moves, ps[first : last + 1]), strict=True)
            if first == last:
                touching = max(max(below[0], at_x[0]), max(at_x[0], above[0]))
            else:
                touching = max(below[0], at_x[0]) + sum(at_x[1:-1]) + max(at_x[-1], above[-1])
            worst = max(worst, touching + outside(ps[:first], ps[last + 1 :]))
    return worst


@dataclass(frozen=True)
class QuantilePlan:
    """Everything a quantile release will do and state, from public settings only.

    Each p's value is chosen with `node_epsilon` (the same for every p); a level of the release
    order costs `level_costs[l]` × that, and the levels add up to `value_epsilon`. The ladder
    costs `interval_epsilon`. `rank_error95` is the data-free accuracy statement.
    """

    ps: tuple[Fraction, ...]
    bins: int
    rows_moved: int
    epsilon: Fraction
    value_epsilon: Fraction
    interval_epsilon: Fraction
    levels: tuple[tuple[tuple[int, int | None, int | None], ...], ...]
    level_costs: tuple[Fraction, ...]
    node_epsilon: Fraction
    value_scales: tuple[Fraction, ...]  # per p: coin scale, in units of 1/(2d) rank
    interval_scale: Fraction  # discrete Laplace scale of each ladder block count

    @property
    def value_score_sensitivity(self) -> tuple[int, ...]:
        """Δ of each p's score (units of 1/(2d) rank): 2·max(a, d − a) per row moved."""
        return tuple(_weight_of(p) * self.rows_moved for p in self.ps)

    def value_rank_bound(self, miss: float) -> tuple[float, ...]:
        """T per p: P(the released point's score exceeds the best score by more than T ranks)
        ≤ miss, for any data.

        Permute-and-flip outputs a point only if its coin came up, so P(S − S_min ≥ x) ≤ Σ over
        the ≤ B − 1 points that far from the best of exp(−x/scale). The score is the distance
        of p·n from the point's rank with half the rows rounded to it counted below, so the
        released point's rank is within T of p·n plus S_min (at most half the rows rounded to
        the true quantile's grid point: 0 for continuous data at a fine resolution).
        """
        if self.bins == 1:
            return tuple(0.0 for _ in self.ps)
        log_term = math.log((self.bins - 1) / miss)
        return tuple(
            float(scale) * log_term / (2 * p.denominator)
            for p, scale in zip(self.ps, self.value_scales, strict=True)
        )

    @property
    def rank_error95(self) -> tuple[float, ...]:
        """The planning statement: 95% rank error of each released value (data-free bound)."""
        return self.value_rank_bound(0.05)

    @property
    def ladder_cuts(self) -> int:
        """Cut slots per cell: each value's own block edges and doubling blocks either side."""
        per_value = 2 * (max(1, (self.bins - 1).bit_length()) + 1)
        return len(self.ps) * per_value

    @property
    def interval_miss(self) -> float:
        """Miss rate allowed at each cut: one side's 2.5%, union-bounded over the distinct cuts
        a cell can have (at most one per pair of neighbouring grid points)."""
        return SIDE_MISS / max(1, min(self.ladder_cuts, self.bins - 1))

    def interval_bound(self, index: int, below: ArrayLike, above: ArrayLike) -> NDArray[np.float64]:
        """w such that P(N ≥ w) ≤ interval_miss for the noise N of d·Ũ − a·ñ (units of 1/d
        rank) of p = ps[index], when Ũ sums `below` noisy blocks and ñ adds `above` more.

        A Chernoff bound, P(N ≥ w) ≤ e^{−λw}·E e^{λN}, with the discrete Laplace moment
        generating function E e^{tZ} = (1 − q)² / ((1 − q e^t)(1 − q e^{−t})), q = e^{−1/scale},
        |t| < 1/scale. Any λ gives a valid bound; the best one is found by bisection, as
        λ·g′(λ) − g(λ) (g the log moment generating function of N) increases with λ.
        """
        return _chernoff_bound(
            self.ps[index],
            float(self.interval_scale),
            np.asarray(below, dtype=np.float64),
            np.asarray(above, dtype=np.float64),
            self.interval_miss,
        )

    @property
    def interval_rank_halfwidth(self) -> tuple[float, ...]:
        """Per p, how far (ranks) from p·n a cut can be and still not be ruled out by the
        ladder when every cut slot is a block (data-free). The interval in the column's units
        is that band mapped through the cell's values, widened to the doubling blocks' edges."""
        blocks = max(1, min(self.ladder_cuts, self.bins - 1)) + 1
        return tuple(
            float(self.interval_bound(i, blocks // 2, blocks - blocks // 2)) / p.denominator
            for i, p in enumerate(self.ps)
        )


def _chernoff_bound(
    p: Fraction, scale: float, below: NDArray[np.float64], above: NDArray[np.float64], miss: float
) -> NDArray[np.float64]:
    a, d = p.numerator, p.denominator
    rate = 1.0 / scale
    log_norm = 2 * math.log(-math.expm1(-rate))  # ln (1 − q)²
    threshold = -math.log(miss)

    def log_mgf_and_slope(lam: NDArray[np.float64]) -> tuple[NDArray[np.float64], ...]:
        # 1 − q·e^{±t} = −expm1(±t − 1/scale): exact near t → 1/scale, where q·e^t → 1
        g = np.zeros_like(lam)
        slope = np.zeros_like(lam)
        for weight, count in ((d - a, below), (a, above)):
            rise, fall = lam * weight - rate, -lam * weight - rate
            rest_up, rest_down = -np.expm1(rise), -np.expm1(fall)
            g += count * (log_norm - np.log(rest_up) - np.log(rest_down))
            slope += count * weight * (np.exp(rise) / rest_up - np.exp(fall) / rest_down)
        return g, slope

    low = np.zeros(np.broadcast(below, above).shape)
    # λ·max(a, d − a) must stay below 1/scale; a hair below keeps every term finite
    high = np.full(low.shape, (1 - 1e-6) / (scale * max(a, d - a)))
    for _ in range(60):
        mid = (low + high) / 2
        g, slope = log_mgf_and_slope(mid)
        further = mid * slope - g < threshold
        low, high = np.where(further, mid, low), np.where(further, high, mid)
    lam = (low + high) / 2
    g, _ = log_mgf_and_slope(lam)
    return (g + threshold) / lam * (1 + 1e-9)  # the margin covers float rounding in the bound


@dataclass(frozen=True)
class QuantileRelease:
    """Released grid point indices, [cells × len(plan.ps)], monotone in p within a cell, and
    the 95% interval of each: low ≤ value ≤ high. Map them to units with `QuantileGrid`."""

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

    `rows_per_unit` is R, the rows a unit keeps. A quantile sees where rows are, not only how
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
    share = _as_fraction(interval_share, "interval_share")
    if not 0 < share < 1:
        raise SpecError("interval_share", "must be strictly between 0 and 1")
    rows_moved = rows_per_unit * (1 if neighbours is Neighbours.ADD_REMOVE else 2)
    interval_eps = eps * share
    value_eps = eps - interval_eps
    levels = _release_order(len(fractions))
    costs = tuple(_level_cost([fractions[i] for i, _, _ in level]) for level in levels)
    node_eps = value_eps / sum(costs, Fraction(0))
    try:
        value_scales = tuple(
            exact_scale(2 * _weight_of(p) * rows_moved / node_eps) for p in fractions
        )
        interval_scale = exact_scale(Fraction(rows_moved) / interval_eps)
    except NoiseError as exc:
        raise SpecError(
            "epsilon",
            f"is too small for {len(fractions)} quantile(s) at these bounds ({exc}): raise ε, "
            "release fewer p's or lower max_rows_per_unit",
        ) from exc
    return QuantilePlan(
        ps=tuple(fractions),
        bins=bins,
        rows_moved=rows_moved,
        epsilon=eps,
        value_epsilon=value_eps,
        interval_epsilon=interval_eps,
        levels=levels,
        level_costs=costs,
        node_epsilon=node_eps,
        value_scales=value_scales,
        interval_scale=interval_scale,
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
    """2d·|#{x < k} + ½·#{x = k} − p·n| = |d·(below + upto) − 2a·n| per grid point."""
    a, d = p.numerator, p.denominator
    return np.abs(d * (below + upto) - 2 * a * upto[:, -1:])


# --------------------------------------------------------------------------- sampling


def _coins(scores: NDArray[np.int64], scale: Fraction, source: NoiseSource) -> NDArray[np.bool_]:
    """Independent Bernoulli(exp(−score/scale)) per entry (scores ≥ 0), as [G ≥ score].

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
    drawn depends on how many coins came up, and never in practice. The zero test source
    (no bits) gives 0.
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


def _pick_uniform(accepted: NDArray[np.bool_], stream: _BitStream | None) -> NDArray[np.int64]:
    """Per row, a uniformly random column among those accepted (every row accepts one)."""
    counts = accepted.sum(axis=1)
    rank = _uniform_below(stream, np.maximum(counts, 1))
    return np.argmax(np.cumsum(accepted, axis=1) > rank[:, None], axis=1)


def _open_stream(source: NoiseSource, cells: int) -> _BitStream | None:
    if source._open_stream is None:
        return None
    return _BitStream(source._open_stream(), 8 * cells)


def _release_values(
    below: NDArray[np.int64], upto: NDArray[np.int64], plan: QuantilePlan, source: NoiseSource
) -> NDArray[np.int64]:
    """Permute-and-flip for every p, level by level, each p among the points its released
    neighbours in p leave it."""
    cells, bins = below.shape
    points = np.arange(bins)
    values = np.empty((cells, len(plan.ps)), dtype=np.int64)
    for level in plan.levels:
        for i, bound_below, bound_above in level:
            lowest = values[:, bound_below : bound_below + 1] if bound_below is not None else 0
            highest = values[:, bound_above : bound_above + 1] if bound_above is not None else bins
            allowed = (points >= lowest) & (points <= highest)
            scores = _value_scores(below, upto, plan.ps[i])
            best = np.where(allowed, scores, np.iinfo(np.int64).max).min(axis=1, keepdims=True)
            # The coins are drawn for every point; those outside the range are ignored.
            coins = _coins(np.maximum(scores - best, 0), plan.value_scales[i], source)
            values[:, i] = _pick_uniform(coins & allowed, _open_stream(source, cells))
    return values


def _ladder_cuts(values: NDArray[np.int64], bins: int, slots: int) -> NDArray[np.int64]:
    """Per cell, sorted cut points c (a cut splits c | c + 1), `slots` of them: around each
    value v, v − 1 and v (its own block), then v + 2^i − 1 above and v − 2^i below, i ≥ 1.
    Slots that fall outside [0, bins − 2] or repeat hold the sentinel bins − 1."""
    steps = 1 << np.arange(1, max(1, (bins - 1).bit_length()) + 1)
    offsets = np.concatenate([[-1, 0], steps - 1, -steps])
    cuts = (values[:, :, None] + offsets[None, None, :]).reshape(values.shape[0], -1)
    cuts = np.where((cuts >= 0) & (cuts <= bins - 2), cuts, bins - 1)
    cuts = np.sort(cuts, axis=1)
    repeated = np.zeros(cuts.shape, dtype=bool)
    repeated[:, 1:] = cuts[:, 1:] == cuts[:, :-1]
    cuts = np.sort(np.where(repeated, bins - 1, cuts), axis=1)
    pad = slots - cuts.shape[1]
    return np.pad(cuts, ((0, 0), (0, pad)), constant_values=bins - 1) if pad > 0 else cuts


def _release_intervals(
    upto: NDArray[np.int64],
    values: NDArray[np.int64],
    plan: QuantilePlan,
    source: NoiseSource,
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The ladder: noisy block counts, then for each p the cuts where rank p·n surely is not."""
    cells, bins = upto.shape
    cuts = _ladder_cuts(values, bins, plan.ladder_cuts)
    real_cut = cuts < bins - 1  # cuts are distinct, sentinels last
    at_cuts = np.take_along_axis(upto, cuts, axis=1)
    n = upto[:, -1:]
    blocks = np.diff(np.concatenate([np.zeros((cells, 1), np.int64), at_cuts, n], axis=1))
    # Block j is (cut j − 1, cut j]; the one after the last real cut runs to the grid's end and
    # those after it are empty. One draw per slot whatever the cuts; an empty slot gets none.
    real_block = np.concatenate([np.ones((cells, 1), dtype=bool), real_cut], axis=1)
    noise = discrete_laplace(plan.interval_scale, blocks.size, source).reshape(blocks.shape)
    noisy = blocks + np.where(real_block, noise, 0)
    noisy_upto = np.cumsum(noisy, axis=1)[:, :-1]
    noisy_n = noisy.sum(axis=1, keepdims=True)
    blocks_below = np.cumsum(real_block, axis=1)[:, :-1]
    blocks_above = real_block.sum(axis=1, keepdims=True) - blocks_below
    # The bounds depend on (blocks below, blocks above) only: computed once per distinct pair.
    pairs, where = np.unique(blocks_below * (cuts.shape[1] + 2) + blocks_above, return_inverse=True)
    distinct = divmod(pairs, cuts.shape[1] + 2)
    margins = [
        plan.interval_bound(i, *distinct)[where].reshape(cuts.shape) for i in range(len(plan.ps))
    ]
    low = np.empty_like(values)
    high = np.empty_like(values)
    for i, p in enumerate(plan.ps):
        a, d = p.numerator, p.denominator
        excess = d * noisy_upto - a * noisy_n  # ≥ 0 iff the cut holds rank p·n (but for noise)
        margin = margins[i]
        surely_past = real_cut & (excess >= margin)
        surely_short = real_cut & (excess + margin < 0)
        first_past = np.argmax(surely_past, axis=1)
        high[:, i] = np.where(surely_past.any(axis=1), cuts[np.arange(cells), first_past], bins - 1)
        last_short = cuts.shape[1] - 1 - np.argmax(surely_short[:, ::-1], axis=1)
        low[:, i] = np.where(surely_short.any(axis=1), cuts[np.arange(cells), last_short] + 1, 0)
    return low, high


def _release_batch(
    histograms: NDArray[np.int64],
    plan: QuantilePlan,
    source: NoiseSource,
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    below, upto = _cumulative(histograms)
    values = _release_values(below, upto, plan, source)
    low, high = _release_intervals(upto, values, plan, source)
    # Post-processing, each step keeping coverage: ends that cross (noise beyond its bounds)
    # span what lies between them; a running min from the top and max from the bottom make
    # the ends monotone in p (they only widen). Then each value is moved into its interval,
    # which can only bring it closer to a quantile the interval holds, and stays monotone.
    low, high = np.minimum(low, high), np.maximum(low, high)
    low = np.minimum.accumulate(low[:, ::-1], axis=1)[:, ::-1]
    high = np.maximum.accumulate(high, axis=1)
    return np.clip(values, low, high), low, high


def release_quantiles(
    histograms: ArrayLike, plan: QuantilePlan, source: NoiseSource | None = None
) -> QuantileRelease:
    """Release every p of `plan` for every cell: values and 95% intervals, as grid indices.

    `histograms` is [cells × plan.bins] of non-negative integer counts. Cells go in batches of
    about 2^20 grid points, so memory stays bounded.
    """
    counts = np.asarray(histograms)
    if counts.ndim != 2 or counts.shape[1] != plan.bins:
        raise NoiseError(f"histograms must be [cells × {plan.bins}], got shape {counts.shape}")
    if not np.issubdtype(counts.dtype, np.integer):
        raise NoiseError("histograms must hold integer counts")
    src = default_noise_source() if source is None else source
    batch = max(1, _BATCH_POINTS // plan.bins)
    parts = [
        _release_batch(np.maximum(counts[start : start + batch], 0).astype(np.int64), plan, src)
        for start in range(0, counts.shape[0], batch)
    ]
    shape = (0, len(plan.ps))
    values, low, high = (
        np.concatenate([part[j] for part in parts]) if parts else np.empty(shape, np.int64)
        for j in range(3)
    )
    return QuantileRelease(plan=plan, values=values, low=low, high=high)
