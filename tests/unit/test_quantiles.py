"""Exact DP quantiles (dprelease.mechanism._quantile): the sampler's law, privacy, coverage.

Statistical tests use fixed seeds, so they are deterministic; each states the false-alarm rate
it would have with fresh seeds. The exact law of the values is computed here independently of
the module, from permute-and-flip's definition (every order of the grid points; small grids).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

import dprelease.mechanism.quantiles._plan as qp
import dprelease.mechanism.quantiles._release as q
from dprelease.change import ProtectedChange
from dprelease.errors import NoiseError, SpecError
from dprelease.mechanism.noise import NoiseSource

HALF = Fraction(1, 2)
QUARTILES = [Fraction(1, 4), HALF, Fraction(3, 4)]


def plan(
    ps: list,
    epsilon: Fraction | int,
    bins: int,
    rows: int = 1,
    neighbours: ProtectedChange = ProtectedChange.ADD_REMOVE,
) -> qp.QuantilePlan:
    return qp.plan_quantiles(ps, Fraction(epsilon), bins, rows, neighbours)


def true_quantile(hist: np.ndarray, p: Fraction) -> np.ndarray:
    """Grid index of rank ⌈p·n⌉ per cell: the smallest k with d·#{x ≤ k} ≥ a·n."""
    upto = np.cumsum(hist, axis=1)
    return np.argmax(upto * p.denominator >= p.numerator * upto[:, -1:], axis=1)


def histograms(values: np.ndarray, bins: int) -> np.ndarray:
    """[cells × n] grid indices → [cells × bins] counts."""
    out = np.zeros((values.shape[0], bins), dtype=np.int64)
    for row, cell in zip(out, values, strict=True):
        row += np.bincount(cell, minlength=bins)
    return out


# --------------------------------------------------------------------------- the exact law


def value_scores(hist: list[int], p: Fraction) -> list[int]:
    """Per grid point k, 2d × the distance of p·n from k's ranks (#{x < k}, #{x ≤ k}], p·n on
    the open end counting half a unit (1/(2d) rank) away, straight from the definition."""
    n = sum(hist)
    out = []
    for k in range(len(hist)):
        below, upto, target = sum(hist[:k]), sum(hist[: k + 1]), p * n
        if below < target <= upto:
            out.append(0)
        elif target <= below:
            out.append(int(2 * p.denominator * (below - target)) + 1)
        else:
            out.append(int(2 * p.denominator * (target - upto)))
    return out


def permute_and_flip_law(scores: dict[int, int], scale: float) -> dict[int, float]:
    """P(output = k) of permute-and-flip: each k's coin is heads with probability
    exp(−(score − best)/scale); the output is the first heads in a uniformly random order."""
    keys = list(scores)
    best = min(scores.values())
    coin = {k: math.exp(-(scores[k] - best) / scale) for k in keys}
    law: dict[int, float] = {}
    for order in itertools.permutations(keys):
        reach = 1.0 / math.factorial(len(keys))  # P(this order, and no heads so far)
        for k in order:
            law[k] = law.get(k, 0.0) + reach * coin[k]
            reach *= 1 - coin[k]
    return law


def exact_values_law(hist: list[int], pl: qp.QuantilePlan) -> dict[tuple[int, ...], float]:
    """P(values) of the level-by-level release, each p among the points its released
    neighbours in p leave it, enumerated from the mechanism's definition."""
    law: dict[tuple[int, ...], float] = {(): 1.0}
    fixed: dict[tuple[int, ...], dict[int, int]] = {(): {}}
    for level in pl.levels:
        next_law: dict[tuple[int, ...], float] = {}
        next_fixed: dict[tuple[int, ...], dict[int, int]] = {}
        for key, weight in law.items():
            known = fixed[key]
            laws = []
            for i, below, above in level:
                lo = known[below] if below is not None else 0
                hi = known[above] if above is not None else len(hist) - 1
                scores = value_scores(hist, pl.ps[i])
                allowed = {k: scores[k] for k in range(lo, hi + 1)}
                laws.append((i, permute_and_flip_law(allowed, float(pl.value_scales[i]))))
            for picks in itertools.product(*(sorted(law_i.items()) for _, law_i in laws)):
                chosen = dict(known)
                w = weight
                for (i, _), (k, pk) in zip(laws, picks, strict=True):
                    chosen[i] = k
                    w *= pk
                new_key = tuple(chosen[i] for i in sorted(chosen))
                next_law[new_key] = next_law.get(new_key, 0.0) + w
                next_fixed[new_key] = chosen
        law, fixed = next_law, next_fixed
    return law


def chi_square_pvalue(observed: Counter, law: dict, n: int) -> float:
    """χ² of observed outcomes against an exact law; outcomes expected < 5 times are pooled."""
    assert all(k in law for k in observed), "an outcome the law says is impossible"
    big = [k for k, pk in law.items() if pk * n >= 5]
    obs = [observed[k] for k in big]
    exp = [law[k] * n for k in big]
    if n - sum(exp) > 1e-9 * n:
        obs.append(n - sum(obs))
        exp.append(n - sum(exp))
    return float(stats.chisquare(obs, exp).pvalue)


HIST = [3, 1, 0, 2, 1, 1]


def sample_values(hist: list[int], pl: qp.QuantilePlan, cells: int, seed: int) -> Counter:
    """`cells` independent draws of the values mechanism on one histogram (before the ladder's
    post-processing, which the law above does not include)."""
    table = np.tile(np.asarray(hist, dtype=np.int64), (cells, 1))
    below, upto = q._cumulative(table)
    values = q._release_values(below, upto, pl, NoiseSource.seeded_for_tests(seed))
    return Counter(map(tuple, values.tolist()))


@pytest.mark.parametrize(("ps", "epsilon"), [([HALF], 3), ([Fraction(1, 3)], 3), (QUARTILES, 6)])
def test_values_follow_the_exact_law(ps: list[Fraction], epsilon: int) -> None:
    """χ² of the released values (jointly, for the quartiles) over 40,000 draws against the
    enumerated law; false-alarm rate 1e-4 per case. The ε is small enough that many outcomes
    are likely, so a wrong law would show."""
    pl = plan(ps, epsilon, len(HIST))
    law = exact_values_law(HIST, pl)
    assert math.isclose(sum(law.values()), 1.0)
    assert len([k for k in law if law[k] * 40_000 >= 5]) >= 5
    assert chi_square_pvalue(sample_values(HIST, pl, 40_000, seed=11), law, 40_000) > 1e-4


def test_chi_square_catches_a_wrong_scale() -> None:
    """The same draws against the law at 1.5× the scale are rejected: the test has power."""
    pl = plan([HALF], 3, len(HIST))
    wrong = plan([HALF], 2, len(HIST))  # ε 2/3 as large: the scale 1.5×
    observed = sample_values(HIST, pl, 40_000, seed=11)
    assert chi_square_pvalue(observed, exact_values_law(HIST, wrong), 40_000) < 1e-6


def test_the_scores_are_the_definitions() -> None:
    """The mechanism's integer scores are the definition's, on tables with ties, gaps and
    empty cells, for p's of several denominators."""
    rng = np.random.default_rng(12)
    tables = rng.integers(0, 4, (300, 7)) * (rng.random((300, 7)) < 0.6)
    tables[:20] = 0
    for p in [HALF, Fraction(1, 3), Fraction(3, 4), Fraction(7, 10)]:
        got = q._value_scores(*q._cumulative(tables), p)
        assert got.tolist() == [value_scores(list(t), p) for t in tables.tolist()]


@pytest.mark.parametrize("p", [HALF, Fraction(1, 4), Fraction(1, 3), Fraction(9, 10)])
def test_the_score_is_zero_at_the_documented_target_alone(p: Fraction) -> None:
    """On heaped data, gaps (grid points without rows) and ranks that land exactly on a block
    of ties' edge, the one point of score 0 is the grid point of rank ⌈p·n⌉; every other point
    scores at least 1, so permute-and-flip at a large ε releases the target. (The earlier score
    |#{x < k} + ½·#{x = k} − p·n|, as OpenDP's with p for ½, had its minimum elsewhere on 30
    zeros, 21 ones, 10 twos and 39 threes: at 2 for a median of 1.)"""
    rng = np.random.default_rng(13)
    heaped = [[30, 21, 10, 39], [0, 30, 0, 21, 10, 0, 39], [50, 50], [25, 25, 25, 25], [1, 0, 1]]
    random = (rng.integers(0, 30, (2000, 6)) * (rng.random((2000, 6)) < 0.5)).tolist()
    for hist in heaped + random:
        if sum(hist) == 0:
            continue
        scores = np.array(value_scores(hist, p))
        truth = int(true_quantile(np.array([hist]), p)[0])
        assert np.flatnonzero(scores == 0).tolist() == [truth], (hist, scores)
        assert q._value_scores(*q._cumulative(np.array([hist])), p)[0].tolist() == scores.tolist()


def test_uniform_choice_rejects_the_biased_top_words() -> None:
    """A 64-bit word at or above 2^64 − (2^64 mod m) would favour small residues: it is redrawn
    (here 2^64 − 1 for m = 3), and m = 1 or a power of two never rejects."""

    class Words:
        def __init__(self, *batches: list[int]) -> None:
            self.batches = [np.array(b, dtype=np.uint64) for b in batches]

        def words(self, n: int, dtype: type) -> np.ndarray:
            batch = self.batches.pop(0)
            assert batch.size == n
            return batch

    stream = Words([2**64 - 1, 5, 2**64 - 1, 2**64 - 1], [7])
    m = np.array([3, 3, 1, 4])
    assert q._uniform_below(stream, m).tolist() == [1, 2, 0, 3]


@pytest.mark.parametrize("m", [3, 7, 1000])
def test_uniform_choice_is_uniform(m: int) -> None:
    """χ² of 60,000 draws below m (in at most 20 equal classes); false-alarm rate 1e-4."""
    source = NoiseSource.seeded_for_tests(m)
    draws = q._uniform_below(q._open_stream(source), np.full(60_000, m))
    classes = np.bincount(draws * min(m, 20) // m, minlength=min(m, 20))
    expected = np.bincount(np.arange(m) * min(m, 20) // m) * 60_000 / m
    assert stats.chisquare(classes, expected).pvalue > 1e-4


# --------------------------------------------------------------------------- privacy


def neighbours_of(hist: tuple[int, ...], rows: int) -> list[tuple[int, ...]]:
    """Every histogram one unit of ≤ `rows` rows away (added); removal is the reverse pair."""
    out = []
    for added in itertools.combinations_with_replacement(range(len(hist)), rows):
        other = list(hist)
        for k in added:
            other[k] += 1
        out.append(tuple(other))
    return out


@pytest.mark.parametrize(
    ("ps", "rows"), [([HALF], 1), ([Fraction(1, 4)], 1), ([HALF], 2), (QUARTILES, 1)]
)
def test_exact_privacy_loss_of_the_values(ps: list[Fraction], rows: int) -> None:
    """Exhaustively, on 4 grid points and up to 4 rows: for every pair of histograms one unit
    apart, every outcome of the values is at most e^ε' times as likely under one as under the
    other, ε' = the plan's value_epsilon. No sampling: the law is exact. For the quartiles this
    checks the level costs: releasing them level by level spends no more than stated."""
    pl = plan(ps, 1, 4, rows=rows)
    worst = 0.0
    for hist in itertools.product(range(5), repeat=4):
        if sum(hist) > 4:
            continue
        law = exact_values_law(list(hist), pl)
        for other in neighbours_of(hist, rows):
            other_law = exact_values_law(list(other), pl)
            assert law.keys() == other_law.keys()  # nothing possible on one side only
            for outcome, a in law.items():
                worst = max(worst, abs(math.log(a / other_law[outcome])))
    assert worst <= float(pl.value_epsilon) + 1e-9
    assert worst > 0.2 * float(pl.value_epsilon)  # the loss is really spent: not vacuous


def random_neighbour(
    rng: np.random.Generator, table: np.ndarray, rows: int, substitute: bool
) -> np.ndarray:
    """A unit of `rows` rows removed and/or added anywhere in the table (half the time all on
    one grid point of one cell: the worst cases)."""
    other = table.copy()
    remove = substitute or rng.random() < 0.5

    def places() -> tuple[np.ndarray, np.ndarray]:
        cells = rng.integers(0, table.shape[0], rows)
        points = rng.integers(0, table.shape[1], rows)
        if rng.random() < 0.5:
            return np.repeat(cells[:1], rows), np.repeat(points[:1], rows)
        return cells, points

    if remove:
        for cell, k in zip(*places(), strict=True):
            other[cell, k] -= other[cell, k] > 0
    if substitute or not remove:
        np.add.at(other, places(), 1)
    return other


@pytest.mark.parametrize("neighbours", [ProtectedChange.ADD_REMOVE, ProtectedChange.SUBSTITUTE])
def test_scores_move_by_at_most_the_stated_sensitivity(neighbours: ProtectedChange) -> None:
    """Random two-cell tables and neighbours (R = 3 rows; a substitution removes 3 and adds 3):
    summed over the cells, no score moves by more than the plan's Δ, and some move by exactly
    Δ (tight). And at the quartiles' second level, where the first and third quartile choose
    among the points below and above a released median, the two together move by at most
    level cost × Δ in units of their own Δ, again tightly."""
    rng = np.random.default_rng(5)
    rows, bins = 3, 9
    pl = plan(QUARTILES + [Fraction(1, 10)], 1, bins, rows=rows, neighbours=neighbours)
    quartiles = plan(QUARTILES, 1, bins, rows=rows, neighbours=neighbours)
    value_moves = np.zeros(len(pl.ps), dtype=np.int64)
    level_spend = Fraction(0)
    for _ in range(4000):
        table = rng.integers(0, 4, size=(2, bins))
        other = random_neighbour(rng, table, rows, neighbours is ProtectedChange.SUBSTITUTE)
        scores = {}
        for i, p in enumerate(pl.ps):
            one = q._value_scores(*q._cumulative(table), p)
            two = q._value_scores(*q._cumulative(other), p)
            scores[p] = np.abs(one - two)
            value_moves[i] = max(value_moves[i], scores[p].max(axis=1).sum())
        median = rng.integers(0, bins, size=(2, 1))
        points = np.arange(bins)
        spend = Fraction(0)
        for i, allowed in ((0, points <= median), (2, points >= median)):
            p = quartiles.ps[i]
            moved = np.where(allowed, scores[p], 0).max(axis=1).sum()
            spend += Fraction(int(moved), quartiles.value_score_sensitivity[i])
        level_spend = max(level_spend, spend)
    assert value_moves.tolist() == list(pl.value_score_sensitivity)
    assert level_spend == quartiles.level_costs[1] == Fraction(4, 3)


def test_ladder_moves_by_at_most_the_rows_a_unit_moves() -> None:
    """The ladder's block counts (for fixed released values) move in L1 by at most the rows one
    unit moves, the sensitivity its discrete Laplace scale is set from; tight."""
    rng = np.random.default_rng(8)
    rows, bins = 3, 40
    pl = plan(QUARTILES, 1, bins, rows=rows, neighbours=ProtectedChange.SUBSTITUTE)
    worst = 0
    for _ in range(2000):
        table = rng.integers(0, 4, size=(2, bins))
        other = random_neighbour(rng, table, rows, substitute=True)
        values = np.sort(rng.integers(0, bins, size=(2, 3)), axis=1)
        cuts = q._ladder_cuts(values, bins, pl.ladder_cuts)
        moved = 0
        for t in (table, other):
            upto = np.cumsum(t, axis=1)
            at = np.take_along_axis(upto, cuts, axis=1)
            blocks = np.diff(np.concatenate([np.zeros((2, 1), int), at, upto[:, -1:]], axis=1))
            moved = blocks - moved
        worst = max(worst, int(np.abs(moved).sum()))
    assert worst == pl.rows_moved == 2 * rows


def test_chernoff_bounds_hold_against_the_exact_law() -> None:
    """For a small scale and a few blocks, the exact law of (d − a)·Σ_below Z − a·Σ_above Z (by
    convolving discrete Laplace pmfs) exceeds the table's bound with probability at most the
    stated miss rate, and the bound is no more than twice the exact tail point."""
    pl = plan(QUARTILES, 4, 16)
    scale = float(pl.interval_scale)
    miss = pl.interval_miss
    reach = int(60 * scale) + 1
    support = np.arange(-reach, reach + 1)
    pmf = np.exp(-np.abs(support) / scale)
    pmf /= pmf.sum()
    for i, p in enumerate(pl.ps):
        a, d = p.numerator, p.denominator
        for below, above in ((1, 1), (3, 2), (6, 5)):
            law, low = np.array([1.0]), 0  # law[j] = P(sum = low + j)
            for weight, count in ((d - a, below), (-a, above)):
                spread = np.zeros(2 * reach * abs(weight) + 1)
                spread[:: abs(weight)] = pmf if weight > 0 else pmf[::-1]
                for _ in range(count):
                    law, low = np.convolve(law, spread), low - reach * abs(weight)
            x = low + np.arange(law.size)
            w = float(pl.interval_bound(i, below, above))
            assert law[x >= w].sum() <= miss
            assert law[x >= w / 2].sum() > miss


def test_empirical_privacy_audit() -> None:
    """The whole release (values, ladder, post-processing) on two neighbouring histograms, a
    row added next to the median, 200,000 releases each: for every released (value, low, high),
    a Clopper–Pearson lower bound on ln(P/P') must stay below ε. Bonferroni over every bound:
    false-alarm rate 1e-6 in total."""
    pl = plan([HALF], 1, 4)
    hist = np.array([2, 1, 1, 2])
    other = np.array([2, 2, 1, 2])
    n = 200_000
    counts = []
    for h, seed in ((hist, 1), (other, 2)):
        release = q.release_quantiles(np.tile(h, (n, 1)), pl, NoiseSource.seeded_for_tests(seed))
        outcomes = release.values[:, 0] * 16 + release.low[:, 0] * 4 + release.high[:, 0]
        counts.append(np.bincount(outcomes, minlength=64))
    seen = np.flatnonzero(counts[0] + counts[1])
    alpha = 1e-6 / (2 * 2 * seen.size)
    worst = -math.inf
    for first, second in ((0, 1), (1, 0)):
        for k in seen:
            ci = stats.binomtest(int(counts[first][k]), n).proportion_ci(1 - 2 * alpha)
            other_ci = stats.binomtest(int(counts[second][k]), n).proportion_ci(1 - 2 * alpha)
            if ci.low > 0:
                worst = max(worst, math.log(ci.low / other_ci.high))
    assert worst <= float(pl.epsilon)
    assert worst > 0  # the two laws differ detectably: the audit looks at something


# --------------------------------------------------------------------------- coverage


def cases(rng: np.random.Generator, bins: int, cells: int) -> dict[str, np.ndarray]:
    """Histograms that stress the interval: skewed, tiny, empty, ties, a gap at the median."""
    lognormal = {
        f"lognormal n={n}": histograms(
            np.clip((rng.lognormal(0, 1, (cells, n)) * bins / 8).astype(int), 0, bins - 1), bins
        )
        for n in (5, 60, 2000)
    }
    one_point = np.zeros((cells, bins), dtype=np.int64)
    one_point[:, bins // 3] = 500
    two_clusters = np.zeros((cells, bins), dtype=np.int64)
    two_clusters[:, 10] = 150
    two_clusters[:, bins - 10] = 150
    return {
        **lognormal,
        "all rows on one point": one_point,
        "two clusters, median in the gap": two_clusters,
        "empty": np.zeros((cells, bins), dtype=np.int64),
    }


@pytest.mark.parametrize("epsilon", [Fraction(1, 2), Fraction(4)])
def test_intervals_cover_at_least_95_percent(epsilon: Fraction) -> None:
    """Over 2,000 cells per case and p, the interval holds the true quantile at least 93.5% of
    the time. If coverage were exactly the guaranteed 95%, 2,000 cells would fall below 93.5%
    (3 standard errors) with probability 0.13%: that is each check's false-alarm rate."""
    rng = np.random.default_rng(3)
    bins, cells = 200, 2000
    pl = plan(QUARTILES, epsilon, bins)
    for name, hist in cases(rng, bins, cells).items():
        release = q.release_quantiles(hist, pl, NoiseSource.seeded_for_tests(7))
        for i, p in enumerate(pl.ps):
            if hist.sum() == 0:
                continue  # an empty cell has no quantile to cover
            truth = true_quantile(hist, p)
            covered = np.mean((release.low[:, i] <= truth) & (truth <= release.high[:, i]))
            assert covered >= 0.935, (name, p, covered)


def test_coverage_test_catches_intervals_without_their_noise_margin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the Chernoff margins set to 0 (cuts judged on their noisy counts alone), coverage
    falls well below 93.5% on the dense cells: the coverage test above has power."""
    monkeypatch.setattr(
        qp.QuantilePlan,
        "interval_bound",
        lambda self, index, below, above: np.zeros(np.shape(below)),
    )
    rng = np.random.default_rng(3)
    hist = cases(rng, 200, 2000)["lognormal n=2000"]
    pl = plan([HALF], Fraction(1, 2), 200)
    release = q.release_quantiles(hist, pl, NoiseSource.seeded_for_tests(7))
    truth = true_quantile(hist, HALF)
    assert np.mean((release.low[:, 0] <= truth) & (truth <= release.high[:, 0])) < 0.8


def test_intervals_are_informative_on_dense_cells() -> None:
    """The coverage test could not fail if intervals were the whole grid: on 2,000 rows at
    ε = 4 the median's interval spans a small part of it, and the value is on the quantile."""
    rng = np.random.default_rng(4)
    bins = 200
    hist = cases(rng, bins, 500)["lognormal n=2000"]
    release = q.release_quantiles(hist, plan([HALF], 4, bins), NoiseSource.seeded_for_tests(8))
    assert np.median(release.high - release.low) < bins / 10
    assert np.median(np.abs(release.values[:, 0] - true_quantile(hist, HALF))) <= 1


def test_monotone_in_p_within_every_cell() -> None:
    """Values, lower and upper ends never decrease with p, and low ≤ value ≤ high, for nine p's
    at a small ε: the values by construction (each p chooses among the points its released
    neighbours in p leave it), the intervals by their widening."""
    rng = np.random.default_rng(6)
    bins = 100
    hist = histograms(rng.integers(0, bins, (3000, 8)), bins)
    ps = [Fraction(k, 10) for k in range(1, 10)]
    release = q.release_quantiles(
        hist, plan(ps, Fraction(1, 5), bins), NoiseSource.seeded_for_tests(9)
    )
    for name in ("values", "low", "high"):
        assert (np.diff(getattr(release, name), axis=1) >= 0).all(), name
    assert (release.low <= release.values).all() and (release.values <= release.high).all()


# --------------------------------------------------------------------------- data-blindness


def test_random_bits_drawn_do_not_depend_on_the_data(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sampler asks for the same draws (sizes and scales) whatever the histograms hold."""
    calls: list[tuple[Fraction, int]] = []
    real = q.discrete_laplace

    def spy(scale: Fraction, size: int, source: NoiseSource | None = None) -> np.ndarray:
        calls.append((scale, size))
        return real(scale, size, source)

    monkeypatch.setattr(q, "discrete_laplace", spy)
    pl = plan(QUARTILES, 1, 50)
    rng = np.random.default_rng(0)
    seen = []
    for hist in (np.zeros((300, 50), np.int64), rng.integers(0, 1000, (300, 50))):
        calls.clear()
        q.release_quantiles(hist, pl, NoiseSource.seeded_for_tests(1))
        seen.append(list(calls))
    assert seen[0] == seen[1] and len(seen[0]) == len(QUARTILES) + 1  # values, then ladder


# --------------------------------------------------------------------------- plan and grid


def test_plan_states_budget_scales_and_rank_error() -> None:
    """Quartiles at ε = 1, R = 2, add/remove: a tenth of ε for the ladder; the median first
    (level cost 1), then the outer quartiles together (level cost 1 + 1/3), so each p's own
    ε is (9/10)/(7/3) = 27/70, more than the (9/10)/3 of releasing them side by side."""
    pl = plan(["3/4", "1/4", "1/2"], 1, 1001, rows=2)
    assert pl.ps == tuple(QUARTILES)
    assert (pl.value_epsilon, pl.interval_epsilon) == (Fraction(9, 10), Fraction(1, 10))
    assert pl.levels == (((1, None, None),), ((0, None, 1), (2, 1, None)))
    assert pl.level_costs == (1, Fraction(4, 3))
    assert pl.node_epsilon == Fraction(27, 70)
    # median: Δ = 2·max(1, 1)·2 = 4 quarter-ranks; scale 2Δ/ε = 560/27 quarter-ranks
    assert pl.value_scales == (Fraction(560, 9), Fraction(560, 27), Fraction(560, 9))
    assert pl.rank_error95[1] == pytest.approx(140 / 27 * math.log(1000 / 0.05))
    assert pl.interval_scale == 20  # Δ = 2 rows per block vector, ε = 1/10


def test_level_costs_of_other_p_sets() -> None:
    """One p costs its ε; two p's cost no less than side by side (p = 1/4 then 3/4: a row
    below 1/4's range moves 3/4's scores by a third of its Δ, but the levels are sequential);
    seven p's (1/8 … 7/8) take three levels and get 1.38× the ε of seven equal shares (735/533)."""
    assert plan([HALF], 1, 10).level_costs == (1,)
    two = plan([Fraction(1, 4), Fraction(3, 4)], 1, 10)
    assert two.level_costs == (1, 1) and two.node_epsilon == Fraction(9, 20)
    seven = plan([Fraction(k, 8) for k in range(1, 8)], 1, 10)
    assert len(seven.levels) == 3
    assert seven.node_epsilon == Fraction(9, 10) / sum(seven.level_costs)
    assert seven.node_epsilon / (Fraction(9, 10) / 7) == Fraction(735, 533)


@pytest.mark.parametrize(
    ("ps", "epsilon", "message"),
    [
        ([], 1, "at least one"),
        ([HALF, HALF], 1, "once"),
        ([Fraction(1)], 1, "strictly between"),
        ([0.5], 1, "exact rational"),
        ([HALF], 0, "positive"),
        ([HALF], Fraction(1, 10**15), "too small"),
    ],
)
def test_plan_refuses_bad_settings(ps: list, epsilon: int, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        qp.plan_quantiles(ps, epsilon, 10, 1, ProtectedChange.ADD_REMOVE)


def test_grid_from_bounds_and_discretize() -> None:
    """Clamp, then round to the nearest grid point, halves to even as the engines do (0.25 is
    half a step of 0.5: to point 0; 0.75: to point 2)."""
    grid = qp.QuantileGrid.from_bounds(0, 100, Fraction(1, 2))
    assert grid.bins == 201 and grid.upper == 100
    assert grid.discretize([-5, 0.2, 0.25, 0.75, 99.9, 1e9, math.inf]).tolist() == [
        0,
        0,
        0,
        2,
        200,
        200,
        200,
    ]
    assert grid.values([0, 3, 200]).tolist() == [0.0, 1.5, 100.0]
    with pytest.raises(SpecError, match="divide"):
        qp.QuantileGrid.from_bounds(0, 1, Fraction(1, 3) * 2)


def test_release_refuses_histograms_of_another_grid() -> None:
    with pytest.raises(NoiseError, match="cells × 10"):
        q.release_quantiles(np.zeros((3, 9), np.int64), plan([HALF], 1, 10))


@pytest.mark.parametrize("p", [Fraction(1, 2), Fraction(1, 4)])
def test_a_cell_beyond_two_to_the_40_rows_still_moves_a_score_by_at_most_delta(p: Fraction) -> None:
    """Capping the counts (as an earlier version did) let one row move a score by 2d; scores
    of cells this large are computed exactly and capped as scores, so Δ = 2·max(a, d − a)."""
    big = np.array([[0, 0, 2**40 - 10, 100]], dtype=np.int64)
    plus = big.copy()
    plus[0, 0] += 1
    moved = np.abs(
        q._value_scores(*q._cumulative(plus), p) - q._value_scores(*q._cumulative(big), p)
    )
    a, d = p.numerator, p.denominator
    assert int(moved.max()) <= 2 * max(a, d - a)
    huge = np.array([[2**61, 2**61]], dtype=np.int64)  # scores past int64: capped, not wrapped
    assert (q._value_scores(*q._cumulative(huge), p) >= 0).all()
