"""Levels with discrete Gaussian noise (and mixtures with discrete Laplace): the law's exact
numerics against brute-force sums of its pmf, margins of error against exact distributions and
simulation, and the consistent estimate's variance.

Discrete Gaussian draws are simulated here by inverse CDF on the exact pmf with a seeded numpy
generator: a test device only (the release path samples exactly, from the OS CSPRNG). Statistical
tests use fixed seeds; each states its false-alarm rate (the chance that a correct implementation
fails it with a fresh seed).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import polars as pl
import pytest
from scipy.special import logsumexp
from scipy.stats import dlaplace

from dprelease.loss import Mechanism
from dprelease.mechanism.margins._consistency import consistent, level_variances
from dprelease.mechanism.margins._moe import _abs_quantile95, _Laws, moe95
from dprelease.mechanism.noise import (
    DiscreteGaussian,
    NoiseLaw,
    NoiseSource,
    discrete_laplace,
    exact_scale,
)
from dprelease.spec import Levels

#: σ² from tiny to huge, both summation regimes (direct ≤ 1/2 < dual) and non-integer rationals.
SIGMA2 = [
    Fraction(1, 100),
    Fraction(1, 3),
    Fraction(1, 2),
    Fraction(3, 5),
    Fraction(1),
    Fraction(2),
    Fraction(7, 2),
    Fraction(1000, 3),
    Fraction(12345, 7),
    Fraction(10**6),
]


def hierarchy(clinics: list[int]) -> pl.DataFrame:
    rows = [(f"r{r}", f"c{r}.{c}") for r, n in enumerate(clinics) for c in range(n)]
    return pl.DataFrame(rows, schema=["region", "clinic"], orient="row")


def support(law: NoiseLaw) -> np.ndarray:
    """Integers holding all but a negligible mass (< e^{-200}) of the law."""
    spread = math.sqrt(float(law.sigma2)) if law.kind is Mechanism.GAUSSIAN else float(law.scale)
    half = math.ceil(20 * spread) + 5
    return np.arange(-half, half + 1)


def pmf(law: NoiseLaw, z: np.ndarray) -> np.ndarray:
    """The exact pmf on `z`, normalised by brute-force summation (outside: < e^{-200})."""
    if law.kind is Mechanism.LAPLACE:
        return dlaplace.pmf(z, 1.0 / float(law.scale))
    weights = np.exp(-(z.astype(float) ** 2) / (2 * float(law.sigma2)))
    return weights / math.fsum(weights)


def draws(law: NoiseLaw, n: int, rng: np.random.Generator, source: NoiseSource) -> np.ndarray:
    """n iid draws: the exact discrete Laplace sampler, or inverse CDF on the exact discrete
    Gaussian pmf (test only)."""
    if law.kind is Mechanism.LAPLACE:
        return discrete_laplace(law.scale, n, source).astype(float)
    z = support(law)
    cdf = np.cumsum(pmf(law, z))
    index = np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right")
    return z[np.minimum(index, z.size - 1)].astype(float)


def error_coefficients(levels: Levels, laws: list[NoiseLaw]) -> list[np.ndarray]:
    """Per level, the matrix taking every level's noise (stacked) to the released values'
    errors, from `consistent` itself: it is linear, so its columns are its unit responses."""
    bounds = np.cumsum(levels.sizes)[:-1]
    width = int(sum(levels.sizes))
    columns = [
        np.concatenate(consistent(levels, np.split(unit, bounds), laws).values)
        for unit in np.eye(width)
    ]
    return np.split(np.column_stack(columns), bounds, axis=0)


# --------------------------------------------------------------------------- the laws


def test_noise_laws_are_ordered_hashable_values() -> None:
    a = NoiseLaw.gaussian(Fraction(9, 2))
    assert a == NoiseLaw.gaussian(4.5) == NoiseLaw(Mechanism.GAUSSIAN, Fraction(9, 2))
    assert hash(a) == hash(NoiseLaw.gaussian(Fraction(9, 2), 1))
    assert a != NoiseLaw.gaussian(Fraction(9, 2), Fraction(1, 2))
    assert len({a, NoiseLaw.gaussian(4.5), NoiseLaw.laplace(Fraction(9, 2))}) == 2
    laws = [
        NoiseLaw.laplace(3),
        NoiseLaw.gaussian(2, Fraction(1, 4)),
        NoiseLaw.laplace(1, 2),
        NoiseLaw.gaussian(1),
        NoiseLaw.laplace(1),
    ]
    assert sorted(laws) == [laws[3], laws[1], laws[4], laws[2], laws[0]]
    assert a.sigma2 == Fraction(9, 2) and a.kind is Mechanism.GAUSSIAN
    laplace = NoiseLaw.laplace(0.1)
    assert laplace.scale == exact_scale(0.1) and laplace.granularity == 1
    with pytest.raises(TypeError, match="has sigma2, not a scale"):
        _ = a.scale
    with pytest.raises(TypeError, match="has a scale, not sigma2"):
        _ = laplace.sigma2


@pytest.mark.parametrize("bad", [0, -1, Fraction(-1, 2), math.nan, math.inf, True, "2"])
def test_gaussian_law_refuses_a_bad_sigma2(bad: object) -> None:
    with pytest.raises(ValueError, match="σ²"):
        NoiseLaw.gaussian(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="granularity"):
        NoiseLaw.gaussian(1, bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("sigma2", SIGMA2)
def test_discrete_gaussian_numerics_match_brute_force_sums(sigma2: Fraction) -> None:
    """Variance, fourth cumulant, log characteristic and moment generating functions (the
    closed forms, direct for σ² ≤ 1/2 and Poisson-dual above) against sums of the pmf."""
    law = NoiseLaw.gaussian(sigma2, Fraction(1, 4))
    dg = DiscreteGaussian(float(sigma2))
    z = support(law)
    p = pmf(law, z)
    zf = z.astype(float)
    var = math.fsum(p * zf**2)
    assert dg.variance == pytest.approx(var, rel=1e-13)
    assert law.variance == pytest.approx(var / 16, rel=1e-13)
    assert dg.variance < float(sigma2) or float(sigma2) >= 3  # equal in float64 from σ² ≈ 3
    if sigma2 <= 1:  # beyond, κ₄ < 1e-5 is below what sums of terms ~σ⁴ can resolve
        k4 = math.fsum(p * zf**4) - 3 * var**2
        assert dg.fourth_cumulant == pytest.approx(k4, rel=1e-9)
    assert dg.fourth_cumulant >= 0
    assert dg.fourth_cumulant <= 1e-15 * float(sigma2) ** 2 or sigma2 < 3  # normal-like κ₄
    s = np.array([0.0, 0.01, 0.3, 1.0, 2.5, math.pi, 4.0, 100.7])
    cf = np.array([math.fsum(p * np.cos(x * zf)) for x in s])
    np.testing.assert_allclose(np.exp(dg.log_cf(s)), cf, rtol=0, atol=1e-13)
    assert np.all(np.isfinite(dg.log_cf(s)))  # the characteristic function is positive
    near = s[s <= 1.0]  # a range that may take the short form (no images, no reduction)
    np.testing.assert_allclose(np.exp(dg.log_cf(near)), cf[s <= 1.0], rtol=0, atol=1e-13)
    sd = math.sqrt(float(sigma2))
    u = np.array([-3.0, -0.2, 0.0, 0.5, 1.0, 7.0]) / sd
    for value, ui in zip(dg.log_mgf(u), u, strict=True):
        tilted = z + round(ui * float(sigma2))  # where e^{uz} P(Z = z) lives
        numerator = logsumexp(-(tilted.astype(float) ** 2) / (2 * float(sigma2)) + ui * tilted)
        denominator = logsumexp(-(zf**2) / (2 * float(sigma2)))
        assert value == pytest.approx(numerator - denominator, rel=1e-12, abs=1e-12)
        assert value <= float(sigma2) * ui**2 / 2 + 1e-15  # σ²-subgaussian


@pytest.mark.parametrize("sigma2", SIGMA2)
def test_discrete_gaussian_quantile_is_the_exact_one(sigma2: Fraction) -> None:
    """The smallest integer h with P(|Z| ≤ h) ≥ 0.95, from the cumulative pmf; no case is a
    near tie (P within 1e-9 of 0.95), so floats decide it."""
    law = NoiseLaw.gaussian(sigma2)
    z = support(law)
    p = pmf(law, z)
    centre = z.size // 2
    within = np.concatenate([[p[centre]], p[centre] + 2 * np.cumsum(p[centre + 1 :])])
    h = int(np.searchsorted(within, 0.95))
    assert abs(within[h] - 0.95) > 1e-9 and (h == 0 or abs(within[h - 1] - 0.95) > 1e-9)
    assert DiscreteGaussian(float(sigma2)).abs_quantile95() == h


@pytest.mark.parametrize("sigma2", SIGMA2)
def test_single_level_moe_is_the_exact_quantile(sigma2: Fraction) -> None:
    """Without margins the error is granularity·Z: the margin of error is granularity × the
    smallest integer h with P(|Z| ≤ h) ≥ 0.95, summed from the pmf."""
    law = NoiseLaw.gaussian(sigma2, Fraction(1, 8))
    z = support(law)
    p = pmf(law, z)
    centre = z.size // 2
    within = np.concatenate([[p[centre]], p[centre] + 2 * np.cumsum(p[centre + 1 :])])
    levels = Levels.build(hierarchy([2, 3]), [])
    assert np.all(moe95(levels, [law])[0] == int(np.searchsorted(within, 0.95)) / 8)


@pytest.mark.parametrize(
    "law",
    [
        NoiseLaw.laplace(Fraction(1, 20)),
        NoiseLaw.laplace(3),
        NoiseLaw.laplace(2**20, Fraction(1, 2**20)),
        NoiseLaw.gaussian(Fraction(1, 100)),
        NoiseLaw.gaussian(Fraction(7, 2)),
        NoiseLaw.gaussian(Fraction(12345, 7)),
        NoiseLaw.gaussian(10**12, Fraction(1, 2**20)),
    ],
)
def test_the_inversion_of_one_draw_is_at_the_exact_quantile(law: NoiseLaw) -> None:
    """The characteristic-function inversion on the hardest error, one lattice draw (a single
    level takes the closed form instead): at or above the exact quantile, by at most 1.7% of
    max(sd, granularity)."""
    laws = _Laws([law])
    h = _abs_quantile95(laws, np.array([0]), np.array([float(law.granularity)]), np.ones(1), 0.0)
    exact = law.moe95
    assert exact <= h <= exact + 0.017 * max(math.sqrt(law.variance), float(law.granularity))


def test_the_inversion_of_one_draw_stays_within_its_stated_excess() -> None:
    """Over 150 laws (σ² and scales on a fine grid, so some exact 95% points sit at an atom's
    edge, the worst case) one draw's inversion is at or above the exact quantile and at most
    12.2τ above it, τ = 2e-3·max(sd, 1): the bound `moe95` states."""
    laws = [NoiseLaw.gaussian(Fraction(k, 20)) for k in range(20, 1220, 12)]
    laws += [NoiseLaw.laplace(Fraction(k, 40)) for k in range(10, 1010, 20)]
    worst = 0.0
    for law in laws:
        h = _abs_quantile95(_Laws([law]), np.array([0]), np.ones(1), np.ones(1), 0.0)
        exact = law.moe95
        tau = 2e-3 * max(math.sqrt(law.variance), 1.0)
        assert exact <= h <= exact + 12.2 * tau, law
        worst = max(worst, (h - exact) / tau)
    assert worst > 7.0, worst  # the grid does reach near-worst cases


def test_discrete_gaussian_quantile_at_huge_sigma2() -> None:
    """σ² = 10¹²: the continuous quantile 1.959964σ, less the half unit of the lattice."""
    assert DiscreteGaussian(1e12).abs_quantile95() == math.ceil(1.959963984540054e6 - 0.5)


# --------------------------------------------------------------------------- margins of error


def _abs_quantile_on_lattice(coefficients: list[int], denominator: int, law: NoiseLaw) -> float:
    """95% quantile of |Σ c_i Z_i| / denominator (iid Z_i of `law`) by exact convolution."""
    z = support(law)
    p = pmf(law, z)
    total = np.array([1.0])
    for c in coefficients:
        term = np.zeros(abs(c) * (z.size - 1) + 1)
        term[(z - z[0]) * abs(c)] = p
        total = np.convolve(total, term)
    values = np.arange(total.size) - (total.size - 1) // 2
    order = np.argsort(np.abs(values), kind="stable")
    cumulative = np.cumsum(total[order])
    return abs(values[order][np.searchsorted(cumulative, 0.95)]) / denominator


@pytest.mark.parametrize("sigma2", [Fraction(1, 2), Fraction(3), Fraction(50), Fraction(1001, 3)])
def test_gaussian_moe_matches_exact_convolution(sigma2: Fraction) -> None:
    """Two cells and their total, one discrete Gaussian law: the cell's error is
    (2Z_a − Z_b + Z_T)/3 and the total's (Z_a + Z_b + 2Z_T)/3, lattices with exact quantiles;
    the margin of error is at or above them, by at most 1.6% of max(sd, 1)."""
    levels = Levels.build(pl.DataFrame({"cell": ["a", "b"]}), [[]])
    law = NoiseLaw.gaussian(sigma2)
    cells, total = moe95(levels, [law, law])
    sd_cell, sd_total = (math.sqrt(v[0]) for v in level_variances(levels, [law, law]))
    exact_cell = _abs_quantile_on_lattice([2, -1, 1], 3, law)
    exact_total = _abs_quantile_on_lattice([1, 1, 2], 3, law)
    assert exact_cell <= cells[0] <= exact_cell + 0.016 * max(sd_cell, 1)
    assert exact_total <= total[0] <= exact_total + 0.016 * max(sd_total, 1)


def _within(coefficients: np.ndarray, laws: list[NoiseLaw], h: float) -> float:
    """P(|c₀Z₀ + c₁Z₁ + c₂Z₂| ≤ h) exactly (up to the < e^{-200} outside the supports), for
    independent Z_i of `laws` and any real c: the law of the first two terms sorted, the third
    summed over."""
    (z0, p0), (z1, p1), (z2, p2) = [(support(law), pmf(law, support(law))) for law in laws]
    pairs = (coefficients[0] * z0[:, None] + coefficients[1] * z1[None, :]).ravel()
    order = np.argsort(pairs)
    values = pairs[order]
    cumulative = np.concatenate([[0.0], np.cumsum((p0[:, None] * p1[None, :]).ravel()[order])])
    shift = coefficients[2] * z2
    upper = np.searchsorted(values, h - shift, side="right")
    lower = np.searchsorted(values, -h - shift, side="left")
    return float(p2 @ (cumulative[upper] - cumulative[lower]))


@pytest.mark.parametrize(
    ("cells", "total"),
    [
        (NoiseLaw.laplace(2), NoiseLaw.gaussian(Fraction(9, 2))),
        (NoiseLaw.gaussian(3), NoiseLaw.laplace(Fraction(3, 2))),
        (NoiseLaw.gaussian(30), NoiseLaw.laplace(Fraction(1, 2))),
        (NoiseLaw.laplace(Fraction(1, 2)), NoiseLaw.gaussian(40)),
        (NoiseLaw.gaussian(Fraction(5, 3)), NoiseLaw.gaussian(Fraction(20, 7))),
    ],
)
def test_mixed_law_moe_against_the_exact_distribution(cells: NoiseLaw, total: NoiseLaw) -> None:
    """Two cells and their total with different laws (the coefficients are then irrational):
    P(|E| ≤ h) ≥ 0.95 exactly, and P(|E| ≤ h − 1.6%·max(sd, max|c|)) < 0.95, so h is at most
    that far above the exact quantile."""
    levels = Levels.build(pl.DataFrame({"cell": ["a", "b"]}), [[]])
    laws = [cells, total]
    coefficients = error_coefficients(levels, laws)
    margins = moe95(levels, laws)
    sds = level_variances(levels, laws)
    for level in range(2):
        c = coefficients[level][0]
        h = float(margins[level][0])
        slack = 0.016 * max(math.sqrt(sds[level][0]), float(np.abs(c).max()))
        assert _within(c, [cells, cells, total], h) >= 0.95
        assert _within(c, [cells, cells, total], h - slack) < 0.95


@pytest.mark.parametrize(
    "laws",
    [
        [NoiseLaw.gaussian(Fraction(25, 2)), NoiseLaw.gaussian(25), NoiseLaw.gaussian(50)],
        [
            NoiseLaw.laplace(2),
            NoiseLaw.gaussian(Fraction(9, 2)),
            NoiseLaw.gaussian(Fraction(20, 3)),
        ],
    ],
    ids=["gaussian", "mixed"],
)
def test_gaussian_and_mixed_moe_cover_95_percent(laws: list[NoiseLaw]) -> None:
    """A 120-cell hierarchy (terms merged and folded into a normal): of 2e5 simulated errors
    (`consistent`'s coefficients × seeded draws) a share in [0.95 − 4 se, 0.9535] lies within
    the MoE of a cell, a region and the total (se = 4.9e-4). The true coverages are 0.9508 to
    0.9516 (2e6 simulated errors, se 1.5e-4): the MoE errs up by design, by about 1.25% of the
    scale. False alarm: at most 3 × P(N > 3.3) ≈ 1.5e-3 per law set (the upper bound; the lower
    one is more than 5 se away)."""
    levels = Levels.build(hierarchy([10] * 12), [["region"], []])
    coefficients = error_coefficients(levels, laws)
    n = 200_000
    rng = np.random.default_rng(43)
    source = NoiseSource.seeded_for_tests(43)
    noise = np.hstack(
        [
            draws(law, n * size, rng, source).reshape(n, size)
            for law, size in zip(laws, levels.sizes, strict=True)
        ]
    )
    se = math.sqrt(0.05 * 0.95 / n)
    for k, moe in enumerate(moe95(levels, laws)):
        coverage = np.mean(np.abs(noise @ coefficients[k][0]) <= moe[0])
        assert 0.95 - 4 * se <= coverage <= 0.9535, (levels.name(k), coverage)


# --------------------------------------------------------------------------- the estimate


def test_consistent_variance_with_gaussian_laws_is_level_variances() -> None:
    """Small σ², where the discrete Gaussian's variance is well below σ² (0.215 for σ² = 1/4):
    over 50000 simulated releases the sample variance of `consistent`'s error for a cell, a
    region and the total is within 5 standard errors (from the sample's fourth moment) of
    `level_variances`; with draws of variance σ² the estimate's variance would be 20 to 39
    standard errors away, so the test tells the two apart.
    False alarm: 3 × P(|N| > 5) ≈ 2e-6."""
    levels = Levels.build(hierarchy([2, 3, 4, 5, 6, 2, 3, 6]), [["region"], []])
    laws = [
        NoiseLaw.gaussian(Fraction(1, 4)),
        NoiseLaw.gaussian(Fraction(1, 5)),
        NoiseLaw.gaussian(Fraction(2, 7)),
    ]
    coefficients = error_coefficients(levels, laws)
    n = 50_000
    rng = np.random.default_rng(5)
    source = NoiseSource.seeded_for_tests(5)
    noise = np.hstack(
        [
            draws(law, n * size, rng, source).reshape(n, size)
            for law, size in zip(laws, levels.sizes, strict=True)
        ]
    )
    sigma2 = np.repeat([float(law.sigma2) for law in laws], levels.sizes)
    for k, exact in enumerate(level_variances(levels, laws)):
        c = coefficients[k][0]
        errors = noise @ c
        sample = errors.var()
        se = math.sqrt((np.mean(errors**4) - sample**2) / n)
        assert abs(sample - exact[0]) <= 5 * se, (levels.name(k), sample, exact[0])
        assert abs(float(c**2 @ sigma2) - exact[0]) > 8 * se
