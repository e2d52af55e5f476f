"""A quantile statistic drawn: scores from each cell's histogram, permute-and-flip level by
level, the noisy ladder and the intervals it gives (see the folder's face for the design)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dprelease.errors import NoiseError
from dprelease.mechanism.noise import (
    NoiseSource,
    WordStream,
    default_noise_source,
    discrete_laplace,
    word_stream,
)
from dprelease.mechanism.quantiles._plan import QuantilePlan

#: Cells per batch: about 2^20 grid points in flight, whatever the number of cells.
_BATCH_POINTS = 1 << 20


@dataclass(frozen=True)
class QuantileRelease:
    """Released grid point indices, [cells × len(plan.ps)], monotone in p within a cell, and
    the 95% interval of each: low ≤ value ≤ high. Map them to units with `QuantileGrid`."""

    plan: QuantilePlan
    values: NDArray[np.int64]
    low: NDArray[np.int64]
    high: NDArray[np.int64]


# --------------------------------------------------------------------------- scores

#: Cells with fewer rows (weighted: weight steps) have int64 scores (d ≤ 2^20); the scores of
#: larger ones are capped here.
_EXACT_ROWS = 1 << 40
_SCORE_CAP = 1 << 62


def _cumulative(histograms: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(below, upto): #{x < k} and #{x ≤ k} per grid point, exact (a cell's rows fit int64)."""
    upto = np.cumsum(histograms, axis=1)
    below = np.empty_like(upto)
    below[:, 0] = 0
    below[:, 1:] = upto[:, :-1]
    return below, upto


def _value_scores(
    below: NDArray[np.int64], upto: NDArray[np.int64], p: Fraction
) -> NDArray[np.int64]:
    """2d × the distance, in ranks, of p·n from grid point k's ranks (#{x < k}, #{x ≤ k}]:
    max(0, 2(d·#{x < k} − a·n) + 1, 2(a·n − d·#{x ≤ k})) for p = a/d, at most 2^62 so it fits
    int64.

    It is 0 exactly where #{x < k} < p·n ≤ #{x ≤ k}, at the grid point of rank ⌈p·n⌉ alone
    (the documented target, however many rows tie there), and ≥ 1 everywhere else: p·n on the
    open end #{x < k} counts half a unit away (the + 1), so the point after the target, and a
    grid point without rows, never ties with it. One row moves each of the two terms by at most
    2·max(a, d − a), so the score too.

    The cap applies to the score itself, a 1-Lipschitz function of it, so one row still moves a
    score by at most the stated Δ (capping the counts instead would not: a capped n with an
    uncapped #{x ≤ k} moves the score twice as much). Cells of fewer than 2^40 rows are computed
    in int64 (d ≤ 2^20: every term below 2^62); larger ones, never seen in practice, exactly in
    Python integers.
    """
    a, d = p.numerator, p.denominator
    n = upto[:, -1:]
    small = n[:, 0] < _EXACT_ROWS
    if small.all():
        return _distance(below, upto, n, a, d)
    scores = np.empty_like(upto)
    scores[small] = _distance(below[small], upto[small], n[small], a, d)
    big = ~small
    exact = _distance(
        below[big].astype(object), upto[big].astype(object), n[big].astype(object), a, d
    )
    scores[big] = np.minimum(exact, _SCORE_CAP).astype(np.int64)
    return scores


def _distance(below: NDArray[Any], upto: NDArray[Any], n: NDArray[Any], a: int, d: int) -> Any:
    """The score of `_value_scores` on int64 or Python-integer (object) arrays."""
    past = 2 * (d * below - a * n) + 1  # p·n at or before #{x < k}: k is past the target
    short = 2 * (a * n - d * upto)  # p·n beyond #{x ≤ k}: k falls short of it
    return np.maximum(np.maximum(past, short), 0)


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


def _uniform_below(stream: WordStream | None, m: NDArray[np.int64]) -> NDArray[np.int64]:
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


def _pick_uniform(accepted: NDArray[np.bool_], stream: WordStream | None) -> NDArray[np.int64]:
    """Per row, a uniformly random column among those accepted (every row accepts one)."""
    counts = accepted.sum(axis=1)
    rank = _uniform_below(stream, np.maximum(counts, 1))
    return np.argmax(np.cumsum(accepted, axis=1) > rank[:, None], axis=1)


def _open_stream(source: NoiseSource) -> WordStream | None:
    """A fresh stream of the source's words (None for the zero test source)."""
    return word_stream(source)


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
            values[:, i] = _pick_uniform(coins & allowed, _open_stream(source))
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

    `histograms` is [cells × plan.bins] of non-negative integer counts (a weighted plan's:
    weight steps, each row's at most `plan.mass_per_row`). Cells go in batches of about 2^20
    grid points, so memory stays bounded.
    """
    counts = np.asarray(histograms)
    if counts.ndim != 2 or counts.shape[1] != plan.bins:
        raise NoiseError(f"histograms must be [cells × {plan.bins}], got shape {counts.shape}")
    if not np.issubdtype(counts.dtype, np.integer):
        raise NoiseError("histograms must hold integer counts")
    return _release(
        counts.shape[0],
        lambda start, stop: np.maximum(counts[start:stop], 0).astype(np.int64),
        plan,
        source,
    )


def release_observed_quantiles(
    cells: int,
    cell: ArrayLike,
    point: ArrayLike,
    rows: ArrayLike,
    plan: QuantilePlan,
    source: NoiseSource | None = None,
) -> QuantileRelease:
    """`release_quantiles` of `cells` histograms given as their non-zero entries: `rows` rows
    of cell `cell` at grid point `point` (an engine's observed pairs, each pair once). Each
    batch of cells is laid out densely only while it is drawn, so memory stays bounded
    whatever the number of cells × grid points."""
    at_cell = np.asarray(cell, dtype=np.int64)
    order = np.argsort(at_cell, kind="stable")
    at_cell = at_cell[order]
    at_point = np.asarray(point, dtype=np.int64)[order]
    counts = np.asarray(rows, dtype=np.int64)[order]

    def dense(start: int, stop: int) -> NDArray[np.int64]:
        lo, hi = np.searchsorted(at_cell, [start, stop])
        out = np.zeros((stop - start, plan.bins), dtype=np.int64)
        out[at_cell[lo:hi] - start, at_point[lo:hi]] = counts[lo:hi]
        return out

    return _release(cells, dense, plan, source)


def _release(
    cells: int,
    batch_of: Callable[[int, int], NDArray[np.int64]],
    plan: QuantilePlan,
    source: NoiseSource | None,
) -> QuantileRelease:
    src = default_noise_source() if source is None else source
    batch = max(1, _BATCH_POINTS // plan.bins)
    parts = [
        _release_batch(batch_of(start, min(start + batch, cells)), plan, src)
        for start in range(0, cells, batch)
    ]
    shape = (0, len(plan.ps))
    values, low, high = (
        np.concatenate([part[j] for part in parts]) if parts else np.empty(shape, np.int64)
        for j in range(3)
    )
    return QuantileRelease(plan=plan, values=values, low=low, high=high)
