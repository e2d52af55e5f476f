"""Exact DP quantiles (dprelease.mechanism._quantile): the sampler's law, privacy, coverage.

Statistical tests use fixed seeds, so they are deterministic; each states the false-alarm rate
it would have with fresh seeds. The exact law of a release is computed here independently of
the module, by enumerating which grid points' coins come up (small grids only).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

import dprelease.mechanism._quantile as q
from dprelease.errors import NoiseError, SpecError
from dprelease.noise import NoiseSource
from dprelease.profile import Neighbours

HALF = Fraction(1, 2)
QUARTILES = [Fraction(1, 4), HALF, Fraction(3, 4)]


def plan(ps, epsilon, bins, rows=1, neighbours=Neighbours.ADD_REMOVE) -> q.QuantilePlan:
    return q.plan_quantiles(ps, Fraction(epsilon), bins, rows, neighbours)


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


def rank_ranges(hist: list[int]) -> tuple[list[int], list[int]]:
    upto = list(itertools.accumulate(hist))
    return [u - h for u, h in zip(upto, hist, strict=True)], upto


def value_scores(hist: list[int], p: Fraction) -> list[Fraction]:
    """Distance (in ranks) of p·n from the ranks each grid point holds."""
    below, upto = rank_ranges(hist)
    target = p * sum(hist)
    return [max(Fraction(0), b - target, target - u) for b, u in zip(below, upto, strict=True)]


def end_scores(hist: list[int], value: int, target: int) -> dict[int, int]:
    """Interval-end scores of every point but `value` (ranks counted away from it)."""
    scores = {}
    for j in range(len(hist)):
        if j > value:
            lo, hi = sum(hist[value + 1 : j]), sum(hist[value + 1 : j + 1])
        elif j < value:
            lo, hi = sum(hist[j + 1 : value]), sum(hist[j:value])
        else:
            continue
        if j in (0, len(hist) - 1):
            hi += target
        scores[j] = max(0, lo - target, target - hi)
    return scores


def permute_and_flip_law(coin: dict[int, float], fallback: int) -> dict[int, float]:
    """P(output = k) when each k's coin is heads with probability coin[k] and the output is a
    uniform heads-up k (`fallback` when none is)."""
    keys = list(coin)
    law: dict[int, float] = {}
    for heads in itertools.product([False, True], repeat=len(keys)):
        weight = math.prod(coin[k] if h else 1 - coin[k] for k, h in zip(keys, heads, strict=True))
        chosen = [k for k, h in zip(keys, heads, strict=True) if h] or [fallback]
        for k in chosen:
            law[k] = law.get(k, 0.0) + weight / len(chosen)
    return law


def exact_release_law(hist: list[int], pl: q.QuantilePlan) -> dict[tuple[int, int, int], float]:
    """P(value, low, high) of a one-p release, from the mechanism's definition."""
    (p,) = pl.ps
    scale = float(pl.value_scales[0]) / p.denominator  # in ranks
    values = permute_and_flip_law(
        {k: math.exp(-float(s) / scale) for k, s in enumerate(value_scores(hist, p))}, 0
    )
    law = {}
    for v, pv in values.items():
        coin = {
            j: math.exp(-s / float(pl.interval_scale))
            for j, s in end_scores(hist, v, pl.interval_targets[0]).items()
        }
        high = permute_and_flip_law({j: c for j, c in coin.items() if j > v}, v)
        low = permute_and_flip_law({j: c for j, c in coin.items() if j < v}, v)
        for (lo, pl_), (hi, ph) in itertools.product(low.items(), high.items()):
            law[(v, lo, hi)] = law.get((v, lo, hi), 0.0) + pv * pl_ * ph
    return law


def chi_square_pvalue(observed: Counter, law: dict, n: int) -> float:
    """χ² of observed outcomes against an exact law; outcomes expected < 5 times are pooled."""
    big = [k for k, pk in law.items() if pk * n >= 5]
    obs = [observed[k] for k in big]
    exp = [law[k] * n for k in big]
    rest_obs, rest_exp = n - sum(obs), n - sum(exp)
    if rest_exp > 1e-9 * n:
        obs.append(rest_obs)
        exp.append(rest_exp)
    assert sum(observed[k] for k in observed if k not in law) == 0, "impossible outcome"
    return float(stats.chisquare(obs, exp).pvalue)


HIST = [3, 1, 0, 2, 1, 1]


def draw_one_p(hist: list[int], pl: q.QuantilePlan, cells: int, seed: int) -> Counter:
    """`cells` independent releases of one histogram (each cell is its own draw)."""
    release = q.release_quantiles(
        np.tile(np.asarray(hist, dtype=np.int64), (cells, 1)),
        pl,
        NoiseSource.seeded_for_tests(seed),
    )
    return Counter(
        zip(
            release.values[:, 0].tolist(),
            release.low[:, 0].tolist(),
            release.high[:, 0].tolist(),
            strict=True,
        )
    )


@pytest.mark.parametrize("p", [HALF, Fraction(1, 3)])
def test_release_follows_the_exact_law(p: Fraction) -> None:
    """χ² of (value, low, high) over 40,000 releases against the enumerated law; false-alarm
    rate 1e-4 per case. The scale is large enough that many outcomes are likely."""
    pl = plan([p], 3, len(HIST))
    law = exact_release_law(HIST, pl)
    assert math.isclose(sum(law.values()), 1.0)
    assert len([k for k in law if law[k] * 40_000 >= 5]) >= 12  # the test sees many outcomes
    assert chi_square_pvalue(draw_one_p(HIST, pl, 40_000, seed=11), law, 40_000) > 1e-4


def test_chi_square_catches_a_wrong_scale() -> None:
    """The same draws against the law at 1.5× the scale are rejected: the test has power."""
    pl = plan([HALF], 3, len(HIST))
    wrong = plan([HALF], 2, len(HIST))  # ε 2/3 as large: every scale 1.5×
    observed = draw_one_p(HIST, pl, 40_000, seed=11)
    assert chi_square_pvalue(observed, exact_release_law(HIST, wrong), 40_000) < 1e-6


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


@pytest.mark.parametrize(("p", "rows"), [(HALF, 1), (Fraction(1, 4), 1), (HALF, 2)])
def test_exact_privacy_loss_on_a_tiny_grid(p: Fraction, rows: int) -> None:
    """Exhaustively, on 3 grid points and up to 4 rows: for every pair of histograms one unit
    apart, every outcome (value, low, high) is at most e^ε times as likely under one as under
    the other (ε of the p, value and interval together). No sampling: the law is exact."""
    epsilon = Fraction(1)
    pl = plan([p], epsilon, 3, rows=rows)
    worst = 0.0
    for hist in itertools.product(range(5), repeat=3):
        if sum(hist) > 4:
            continue
        law = exact_release_law(list(hist), pl)
        for other in neighbours_of(hist, rows):
            other_law = exact_release_law(list(other), pl)
            for outcome in law.keys() | other_law.keys():
                a, b = law.get(outcome, 0.0), other_law.get(outcome, 0.0)
                if a == b == 0:
                    continue  # e.g. an end that always finds the padded domain end
                assert a > 0 and b > 0, "an outcome impossible on one side only breaks ε-DP"
                worst = max(worst, abs(math.log(a / b)))
    assert worst <= float(epsilon) + 1e-9
    assert worst > 0.2 * float(epsilon)  # the bound is not vacuous: the loss is really spent


@pytest.mark.parametrize("neighbours", [Neighbours.ADD_REMOVE, Neighbours.SUBSTITUTE])
def test_scores_move_by_at_most_the_stated_sensitivity(neighbours: Neighbours) -> None:
    """Random two-cell tables and random neighbours (a unit of R = 3 rows added or removed
    anywhere; a substitution removes 3 rows and adds 3, each in either cell): summed over the
    cells, no score moves by more than the plan's Δ, and some move by exactly Δ (tight)."""
    rng = np.random.default_rng(5)
    rows, bins = 3, 9
    pl = plan(QUARTILES + [Fraction(1, 10)], 1, bins, rows=rows, neighbours=neighbours)
    value_moves = np.zeros(len(pl.ps), dtype=np.int64)
    end_move = 0
    for _ in range(4000):
        table = rng.integers(0, 4, size=(2, bins))
        other = table.copy()
        remove = neighbours is Neighbours.SUBSTITUTE or rng.random() < 0.5
        # half the time a unit's rows share one cell and one point: the worst cases
        cells, points = (rng.integers(0, 2, rows), rng.integers(0, bins, rows))
        if rng.random() < 0.5:
            cells, points = np.repeat(cells[:1], rows), np.repeat(points[:1], rows)
        for cell, k in zip(cells, points, strict=True):
            if remove:
                other[cell, k] -= other[cell, k] > 0
        if neighbours is Neighbours.SUBSTITUTE or not remove:
            cells, points = (rng.integers(0, 2, rows), rng.integers(0, bins, rows))
            if rng.random() < 0.5:
                cells, points = np.repeat(cells[:1], rows), np.repeat(points[:1], rows)
            np.add.at(other, (cells, points), 1)
        below, upto = q._cumulative(table)
        below2, upto2 = q._cumulative(other)
        for i, p in enumerate(pl.ps):
            move = np.abs(q._value_scores(below, upto, p) - q._value_scores(below2, upto2, p))
            value_moves[i] = max(value_moves[i], move.max(axis=1).sum())
        value = rng.integers(0, bins, size=2)
        ends = q._end_scores(below, upto, value, 4) - q._end_scores(below2, upto2, value, 4)
        end_move = max(end_move, int(np.abs(ends).max(axis=1).sum()))
    assert value_moves.tolist() == list(pl.value_score_sensitivity)
    assert end_move == pl.interval_score_sensitivity


def test_empirical_privacy_audit() -> None:
    """Released values on two neighbouring histograms (a row added at the median's edge), 200,000
    releases each: for every outcome, a Clopper–Pearson lower bound on ln(P/P') must stay
    below the value's ε. Bonferroni over all bounds: false-alarm rate 1e-6 in total."""
    pl = plan([HALF], 1, 4)
    hist = np.array([2, 1, 1, 2])
    other = np.array([2, 2, 1, 2])
    n = 200_000
    outcomes = []
    for h, seed in ((hist, 1), (other, 2)):
        release = q.release_quantiles(np.tile(h, (n, 1)), pl, NoiseSource.seeded_for_tests(seed))
        outcomes.append(np.bincount(release.values[:, 0], minlength=4))
    alpha = 1e-6 / (2 * 4 * 2)
    worst = -math.inf
    for first, second in ((0, 1), (1, 0)):
        for k in range(4):
            lower = stats.binomtest(int(outcomes[first][k]), n).proportion_ci(1 - 2 * alpha).low
            upper = stats.binomtest(int(outcomes[second][k]), n).proportion_ci(1 - 2 * alpha).high
            worst = max(worst, math.log(lower / upper))
    assert worst <= float(pl.value_epsilon)
    assert worst > 0  # the two laws do differ detectably: the audit looks at something


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
    """Values, lower and upper ends never decrease with p, and low ≤ value ≤ high, even at a
    small ε where the independent draws per p cross often."""
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
    assert seen[0] == seen[1] and len(seen[0]) == 2 * len(QUARTILES)


# --------------------------------------------------------------------------- plan and grid


def test_plan_states_budget_scales_and_rank_error() -> None:
    pl = plan(["3/4", "1/4", "1/2"], 1, 1001, rows=2)
    assert pl.ps == tuple(QUARTILES)
    assert pl.value_epsilon == Fraction(1, 4) and pl.interval_epsilon == Fraction(1, 12)
    # median: Δ = max(1, 1)·2 = 2 in half-ranks, scale 2Δ/ε = 16 half-ranks = 8 ranks
    assert pl.value_scales[1] == 16
    assert pl.rank_error95[1] == pytest.approx(8 * math.log(1000 / 0.05))
    assert pl.interval_scale == 48
    assert all(t > r for t, r in zip(pl.interval_targets, pl.rank_error95, strict=True))


@pytest.mark.parametrize(
    ("ps", "epsilon", "message"),
    [
        ([], 1, "at least one"),
        ([HALF, HALF], 1, "once"),
        ([Fraction(1)], 1, "strictly between"),
        ([0.5], 1, "exact rational"),
        ([HALF], 0, "positive"),
    ],
)
def test_plan_refuses_bad_settings(ps: list, epsilon: int, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        q.plan_quantiles(ps, epsilon, 10, 1, Neighbours.ADD_REMOVE)


def test_grid_from_bounds_and_discretize() -> None:
    grid = q.QuantileGrid.from_bounds(0, 100, Fraction(1, 2))
    assert grid.bins == 201 and grid.upper == 100
    assert grid.discretize([-5, 0.2, 0.25, 99.9, 1e9, math.inf]).tolist() == [
        0,
        0,
        1,
        200,
        200,
        200,
    ]
    assert grid.values([0, 3, 200]).tolist() == [0.0, 1.5, 100.0]
    with pytest.raises(SpecError, match="divide"):
        q.QuantileGrid.from_bounds(0, 1, Fraction(1, 3) * 2)


def test_release_refuses_histograms_of_another_grid() -> None:
    with pytest.raises(NoiseError, match="cells × 10"):
        q.release_quantiles(np.zeros((3, 9), np.int64), plan([HALF], 1, 10))
