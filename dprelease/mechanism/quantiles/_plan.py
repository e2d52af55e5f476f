"""A quantile statistic's public half: its grid, its budget per p and level, its noise
scales and the data-free accuracy it states (see the folder's face for the design)."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dprelease.change import ProtectedChange, reach
from dprelease.errors import NoiseError, SpecError
from dprelease.loss import exact_rational
from dprelease.mechanism.noise import exact_scale, laplace_log_mgf, laplace_log_mgf_slope
from dprelease.spec import MAX_GRID_POINTS, check_quantile_levels, grid_points

#: Share of the statistic's ε spent on the ladder that gives every p its interval.
DEFAULT_INTERVAL_SHARE = Fraction(1, 10)
#: Each side of an interval misses with probability at most this (two sides: 95%).
SIDE_MISS = 0.025


@dataclass(frozen=True)
class QuantileGrid:
    """The public grid a column is discretized to: B points lower + k·resolution, k < B.

    An engine clamps each value to [lower, upper] and rounds (value − lower)/resolution, computed
    in float64, to the nearest integer, halves to even (as both engines round a sum's units);
    `discretize` is that rule, for tests and benchmarks. The released grid point
    of rank ⌈p·n⌉ is within resolution/2 of the clamped column's own quantile.
    """

    lower: Fraction
    resolution: Fraction
    bins: int

    @classmethod
    def from_bounds(
        cls, lower: Fraction | int, upper: Fraction | int, resolution: Fraction | int
    ) -> QuantileGrid:
        """The grid of a statistic's bounds; SpecError as its spec would give (`grid_points`)."""
        lo, hi, res = Fraction(lower), Fraction(upper), Fraction(resolution)
        return cls(lo, res, grid_points(lo, hi, res))

    @property
    def upper(self) -> Fraction:
        return self.lower + (self.bins - 1) * self.resolution

    @property
    def decimals(self) -> int | None:
        """Decimal places that write every grid point exactly (None: some point is no finite
        decimal, e.g. a resolution of 1/3 given as a fraction)."""
        places = 0
        for x in (self.lower, self.resolution):
            d = x.denominator
            twos = (d & -d).bit_length() - 1
            fives, rest = 0, d >> twos
            while rest % 5 == 0:
                fives, rest = fives + 1, rest // 5
            if rest != 1:
                return None
            places = max(places, twos, fives)
        return places

    def values(self, points: ArrayLike) -> NDArray[np.float64]:
        """Grid point indices → values in the column's units (to the grid's decimals, so 0.1 ·
        3 prints as 0.3)."""
        raw = float(self.lower) + np.asarray(points, dtype=np.float64) * float(self.resolution)
        return raw if self.decimals is None else np.round(raw, self.decimals)

    def discretize(self, column: ArrayLike) -> NDArray[np.int64]:
        """Values → grid point indices: clamp to the bounds (±inf too), round to the nearest
        point. NaN has no grid point: an engine applies its null rule before this."""
        x = np.clip(np.asarray(column, dtype=np.float64), float(self.lower), float(self.upper))
        points = np.rint((x - float(self.lower)) / float(self.resolution))
        return np.clip(points, 0, self.bins - 1).astype(np.int64)


def _weight_of(p: Fraction) -> int:
    """2·max(a, d − a) for p = a/d: the most one row moves p's score, in units of 1/(2d) rank
    (the unit that keeps the score, `_value_scores`, an integer)."""
    return 2 * max(p.numerator, p.denominator - p.numerator)


def _row_moves(p: Fraction) -> tuple[Fraction, Fraction]:
    """How far one row at x moves p's score at a point below x and at a point above x, as
    fractions of the most it can move any point: 2a and 2(d − a) over 2·max(a, d − a).

    Below x a row moves only n (both terms of the score by 2a); above x it moves n, #{x < k}
    and #{x ≤ k} alike (by 2(d − a)). At x itself it moves n and #{x ≤ k}: the term that is
    positive when the point is past the target by 2a, the one positive when it falls short by
    2(d − a), so a row at x moves p's score at x by the first fraction if p·n ≤ #{x < x}, by
    the second if p·n > #{x ≤ x}, and not at all between (`_level_cost`).
    """
    a, d = p.numerator, p.denominator
    return Fraction(2 * a, _weight_of(p)), Fraction(2 * (d - a), _weight_of(p))


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
    wholly below or above x moves by `_row_moves`' first or second fraction. At x the p's of
    the run, ascending, move by the first fraction up to some p and by the second from the next
    one on (`_row_moves`: the cut is where p·n passes x's ranks), so every cut is tried.
    """

    def outside(before: list[Fraction], after: list[Fraction]) -> Fraction:
        return sum((_row_moves(p)[0] for p in before), Fraction(0)) + sum(
            (_row_moves(p)[1] for p in after), Fraction(0)
        )

    worst = Fraction(0)
    for j in range(len(ps)):  # x strictly inside p_j's range
        worst = max(worst, 1 + outside(ps[:j], ps[j + 1 :]))
    for first in range(len(ps)):  # x ends ps[first]'s range … starts ps[last]'s
        for last in range(first + 1, len(ps)):  # (one range with x at an end: as inside it)
            run = [_row_moves(p) for p in ps[first : last + 1]]
            for cut in range(len(run) + 1):
                at_x = [moves[0] if i < cut else moves[1] for i, moves in enumerate(run)]
                touching = max(run[0][0], at_x[0]) + sum(at_x[1:-1]) + max(at_x[-1], run[-1][1])
                worst = max(worst, touching + outside(ps[:first], ps[last + 1 :]))
    return worst


@dataclass(frozen=True)
class QuantilePlan:
    """Everything a quantile release will do and state, from public settings only.

    Each p's value is chosen with `node_epsilon` (the same for every p); a level of the release
    order costs `level_costs[l]` × that, and the levels add up to `value_epsilon`. The ladder
    costs `interval_epsilon`. `rank_error95` is the data-free accuracy statement.

    Histograms hold mass in integer units: a row weighs 1 unit (an unweighted quantile) or its
    survey weight in units of `mass_unit` (a weighted one: the weight clamped to [0, W] and
    rounded to a public resolution, at most `mass_per_row` units). Every sensitivity is in
    mass units, so the score's and the ladder's Δ are `rows_moved` × `mass_per_row`; the
    accuracy is stated in the weight's own units (× `mass_unit`: people a row stands for).
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
    value_scales: tuple[Fraction, ...]  # per p: coin scale, in units of 1/(2d) mass unit
    interval_scale: Fraction  # discrete Laplace scale of each ladder block count
    mass_per_row: int = 1  # the most mass units one row adds (W in units; 1: rows counted)
    mass_unit: Fraction = Fraction(1)  # one mass unit in the weight's units (1: a row)

    @property
    def mass_moved(self) -> int:
        """The most mass one unit's change moves over the histograms: rows × each row's most."""
        return self.rows_moved * self.mass_per_row

    @property
    def value_score_sensitivity(self) -> tuple[int, ...]:
        """Δ of each p's score (units of 1/(2d) mass unit): 2·max(a, d − a) per mass unit
        moved."""
        return tuple(_weight_of(p) * self.mass_moved for p in self.ps)

    def value_rank_bound(self, miss: float) -> tuple[float, ...]:
        """T per p: P(the released point's score exceeds the best score by more than T ranks)
        ≤ miss, for any data.

        Permute-and-flip outputs a point only if its coin came up, so P(S − S_min ≥ x) ≤ Σ over
        the ≤ B − 1 points that far from the best of exp(−x/scale). The score is the distance
        of p·n from the point's ranks #{x < k} … #{x ≤ k}, and the best (the true quantile's
        grid point) scores 0, so the released point's ranks come within T of p·n.
        """
        if self.bins == 1:
            return tuple(0.0 for _ in self.ps)
        log_term = math.log((self.bins - 1) / miss) * float(self.mass_unit)
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
        unit = float(self.mass_unit)
        return tuple(
            float(self.interval_bound(i, blocks // 2, blocks - blocks // 2)) * unit / p.denominator
            for i, p in enumerate(self.ps)
        )


def _chernoff_bound(
    p: Fraction, scale: float, below: NDArray[np.float64], above: NDArray[np.float64], miss: float
) -> NDArray[np.float64]:
    a, d = p.numerator, p.denominator
    threshold = -math.log(miss)

    def log_mgf_and_slope(lam: NDArray[np.float64]) -> tuple[NDArray[np.float64], ...]:
        g = np.zeros_like(lam)
        slope = np.zeros_like(lam)
        for weight, count in ((d - a, below), (a, above)):
            g += count * laplace_log_mgf(scale, lam * weight)
            slope += count * weight * laplace_log_mgf_slope(scale, lam * weight)
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


def _as_fraction(x: Fraction | int | str, what: str) -> Fraction:
    """An exact rational given as an int, a Fraction or text ('1/4'): never a float, whose
    binary value would not be the p or ε meant."""
    if isinstance(x, bool) or not isinstance(x, numbers.Rational | str):
        raise SpecError(what, f"must be an exact rational (int, Fraction or '1/4'), got {x!r}")
    exact = exact_rational(x)
    if exact is None:
        raise SpecError(what, f"is not a rational number: {x!r}")
    return exact


def plan_quantiles(
    ps: list[Fraction | int | str] | tuple[Fraction | int | str, ...],
    epsilon: Fraction | int | str,
    bins: int,
    rows_per_unit: int,
    neighbours: ProtectedChange,
    interval_share: Fraction = DEFAULT_INTERVAL_SHARE,
    mass_per_row: int = 1,
    mass_unit: Fraction = Fraction(1),
) -> QuantilePlan:
    """The plan of a quantile statistic at ε: budget per p, exact scales, accuracy. No data.

    `rows_per_unit` is R, the rows a unit keeps. A quantile sees where rows are, not only how
    many, so a substitution moves 2R rows (removed and added) even in an ungrouped release.
    A weighted quantile's rows weigh up to `mass_per_row` units of `mass_unit` each (W / g for
    weights rounded to g): every Δ, and so every scale, is that many times a row's.
    """
    eps = _as_fraction(epsilon, "epsilon")
    if eps <= 0:
        raise SpecError("epsilon", "must be positive")
    fractions = sorted(_as_fraction(p, "quantiles") for p in ps)
    check_quantile_levels(fractions, "quantiles")
    if isinstance(bins, bool) or not isinstance(bins, int) or not 1 <= bins <= MAX_GRID_POINTS:
        raise SpecError("resolution", f"the grid must have 1 to {MAX_GRID_POINTS} points")
    if isinstance(rows_per_unit, bool) or not isinstance(rows_per_unit, int) or rows_per_unit < 1:
        raise SpecError("max_rows_per_unit", "must be a positive integer")
    share = _as_fraction(interval_share, "interval_share")
    if not 0 < share < 1:
        raise SpecError("interval_share", "must be strictly between 0 and 1")
    if isinstance(mass_per_row, bool) or not isinstance(mass_per_row, int) or mass_per_row < 1:
        raise SpecError("survey_weight.upper", "must be at least one unit of the weight's grid")
    rows_moved = reach(neighbours, rows_per_unit, moves=True)  # rows land anywhere on the grid
    mass_moved = rows_moved * mass_per_row
    interval_eps = eps * share
    value_eps = eps - interval_eps
    levels = _release_order(len(fractions))
    costs = tuple(_level_cost([fractions[i] for i, _, _ in level]) for level in levels)
    node_eps = value_eps / sum(costs, Fraction(0))
    try:
        value_scales = tuple(
            exact_scale(2 * _weight_of(p) * mass_moved / node_eps) for p in fractions
        )
        interval_scale = exact_scale(Fraction(mass_moved) / interval_eps)
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
        mass_per_row=mass_per_row,
        mass_unit=Fraction(mass_unit),
    )
