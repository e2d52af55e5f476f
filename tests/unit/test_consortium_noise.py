"""The consortium's noise: shares drawn by the exact sampler, the law of their sum, the share
variance the Kairouz–Liu–Steinke bound asks for, and an empirical privacy audit of the sum."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import polars as pl
import pytest
from helpers import chi2_pvalue_of_pmf
from scipy import stats
from scipy.special import logsumexp

from dprelease.consortium import kls_rho, share_sigma2
from dprelease.loss import Mechanism, PrivacyLoss
from dprelease.mechanism.margins._consistency import consistent
from dprelease.mechanism.margins._moe import moe95
from dprelease.mechanism.noise import (
    LevelNoise,
    NoiseLaw,
    NoiseSource,
    distributed_gaussian_share,
    exact_sigma2,
    gaussian_law,
    summed_gaussian_moe95,
    summed_gaussian_pmf,
    summed_gaussian_variance,
)
from dprelease.spec import Levels

# Each χ² test below fails a correct sampler with probability 1e-4 (its threshold).
P_THRESHOLD = 1e-4


def summed_draws(sigma2: Fraction, parties: int, size: int, seed: int) -> np.ndarray:
    """`size` draws of the sum of `parties` shares, each party with its own source (as sites)."""
    total = np.zeros(size, dtype=np.int64)
    for party in range(parties):
        source = NoiseSource.seeded_for_tests(seed * 100 + party)
        total += distributed_gaussian_share(sigma2, size, source)
    return total


@pytest.mark.parametrize(
    ("sigma2", "parties"), [(Fraction(1, 3), 5), (Fraction(5), 3), (Fraction(21, 4), 2)]
)
def test_the_sum_of_shares_has_the_exact_law(sigma2: Fraction, parties: int) -> None:
    draws = summed_draws(sigma2, parties, 200_000, seed=31)
    z = np.arange(-400, 401)
    assert chi2_pvalue_of_pmf(draws, z, summed_gaussian_pmf(sigma2, parties, z)) > P_THRESHOLD


def test_chi_square_tells_the_sum_from_one_discrete_gaussian_of_its_variance() -> None:
    """At share σ² = 1/3 the sum of 5 is visibly not N_Z(0, 5/3): the test has the power to see
    a wrong law, so the pmf above is not passed by accident."""
    draws = summed_draws(Fraction(1, 3), 5, 200_000, seed=32)
    z = np.arange(-400, 401)
    one = summed_gaussian_pmf(Fraction(5, 3), 1, z)
    assert chi2_pvalue_of_pmf(draws, z, one) < P_THRESHOLD


def test_the_pmf_of_the_sum_is_a_law_with_the_summed_variance() -> None:
    z = np.arange(-300, 301)
    pmf = summed_gaussian_pmf(Fraction(1, 2), 4, z)
    assert pmf.sum() == pytest.approx(1, abs=1e-12)
    assert float((z**2) @ pmf) == pytest.approx(summed_gaussian_variance(Fraction(1, 2), 4))
    assert summed_gaussian_variance(Fraction(7), 3) == pytest.approx(21)


@pytest.mark.parametrize(("sigma2", "parties"), [(Fraction(1, 2), 4), (Fraction(5), 3)])
def test_moe95_is_the_smallest_95_percent_half_width(sigma2: Fraction, parties: int) -> None:
    h = summed_gaussian_moe95(sigma2, parties)
    z = np.arange(-400, 401)
    pmf = summed_gaussian_pmf(sigma2, parties, z)
    assert pmf[np.abs(z) <= h].sum() >= 0.95
    assert pmf[np.abs(z) <= h - 1].sum() < 0.95


def test_a_large_share_variance_reads_the_margin_from_the_discrete_gaussian() -> None:
    """Above σ² = 3 the sum and N_Z(0, n·σ²) agree to far below float rounding."""
    assert summed_gaussian_moe95(Fraction(10**6), 20) == (
        gaussian_law(exact_sigma2(Fraction(20 * 10**6))).abs_quantile95()
    )


# --------------------------------------------------------------------------- the KLS bound


def test_one_honest_party_is_the_discrete_gaussian_itself() -> None:
    """n = 1: τ is an empty sum and ρ = Δ2²/(2σ²), so σ² = Δ2²/(2ρ) exactly (CKS 2020)."""
    assert share_sigma2(Fraction(1, 8), 1, 1, 1, 100) == 4
    assert kls_rho(Fraction(4), 1, 1, 1, 100) == Fraction(1, 8)


def test_tau_by_hand() -> None:
    """n = 3, σ² = 1: τ = 10(e^{−π²} + e^{−4π²/3}) and the extra is min(τd, Δ1τ/√(nσ²) + τ²d/2,
    τ√(dΔ2²/(nσ²)) + τ²d/2), here with d = 10, Δ1 = Δ2² = 1."""
    tau = 10 * (math.exp(-(math.pi**2)) + math.exp(-4 * math.pi**2 / 3))
    extra = min(tau * 10, tau / math.sqrt(3) + tau**2 * 5, tau * math.sqrt(10 / 3) + tau**2 * 5)
    got = float(kls_rho(Fraction(1), 3, 1, 1, 10)) - 1 / 6
    assert got == pytest.approx(extra, rel=1e-6)
    assert got >= extra


def test_tau_is_never_rounded_to_zero() -> None:
    """The review's C5: for σ² ≳ 75 every exp(−2π²σ²k/(k+1)) underflows to 0.0, which made the
    bound exactly Δ2²/(2nσ²) though the true τ is positive; τ is now bounded by an exact power
    of two there, so the ρ stated is above the true bound, and a share still meets ρ."""
    gaussian = Fraction(1, 2 * 20 * 80)
    above = kls_rho(Fraction(80), 20, 1, 1, 10**6)
    assert above > gaussian and above - gaussian < Fraction(1, 2**1000)
    huge = kls_rho(Fraction(10**12), 5, 1, 1, 100)  # a sum's σ² in fine units: still exact
    assert 0 < huge - Fraction(1, 10 * 10**12) <= Fraction(4000, 2**2048)
    rho = Fraction(1, 10**3)
    big = share_sigma2(rho, 5, 1, 1, 10**6)  # base σ² = 100: τ underflows in floats
    assert kls_rho(big, 5, 1, 1, 10**6) <= rho
    step = (1 + Fraction(1, 2**20)) * (1 + Fraction(1, 2**40))  # one grid step, sampler rounding
    assert Fraction(100) < big <= 100 * step


@pytest.mark.parametrize("honest", [2, 3, 5, 20])
@pytest.mark.parametrize("rho", [Fraction(1, 100), Fraction(1, 8), Fraction(2)])
def test_the_share_variance_meets_rho_and_no_less_noise_would(honest: int, rho: Fraction) -> None:
    sigma2 = share_sigma2(rho, honest, 1, 1, 10_000)
    assert kls_rho(sigma2, honest, 1, 1, 10_000) <= rho
    assert sigma2 >= Fraction(1) / (2 * rho * honest)  # never less than the Gaussian's own
    smaller = sigma2 * (1 - Fraction(1, 2**19))
    assert kls_rho(smaller, honest, 1, 1, 10_000) > rho or smaller < 1 / (2 * rho * honest)


def test_a_small_share_variance_is_raised_until_the_bound_holds() -> None:
    """20 sites at ρ = 1/8 would each add σ² = 0.2, where τ is large; the share is raised (the
    price of splitting small noise over many sites), and the manifest states the resulting SD."""
    central = Fraction(4)
    sigma2 = share_sigma2(Fraction(1, 8), 20, 1, 1, 10_000)
    assert sigma2 > 3 * central / 20
    assert kls_rho(sigma2, 20, 1, 1, 10_000) <= Fraction(1, 8)


def test_at_moderate_noise_the_consortium_is_as_accurate_as_central() -> None:
    """5 sites, ρ = 1/20, counts over 10⁴ cells: the shares add up to the central σ² to 1e-5."""
    sigma2 = share_sigma2(Fraction(1, 20), 5, 1, 1, 10_000)
    assert 5 * sigma2 / 10 == pytest.approx(1, abs=1e-5)


# --------------------------------------------------------------------------- empirical privacy
# Neighbours 100 and 101 (Δ = 1) released with the sum of 3 shares whose σ² meets ρ = 1/8 by
# the KLS bound. As in test_noise_audit, Clopper–Pearson bounds on threshold events give a lower
# bound on ε at δ = 1e-3, which must stay below the ε that ρ-zCDP implies.

N = 500_000
ALPHA = 1e-6  # the audit's total false-alarm rate, split by Bonferroni over its bounds
DELTA = 1e-3


def audit_lower_bound(sigma2: Fraction, parties: int, seed: int) -> float:
    low = 100 + summed_draws(sigma2, parties, N, seed)
    high = 101 + summed_draws(sigma2, parties, N, seed + 1)
    thresholds = np.arange(85, 117)
    ordered_low, ordered_high = np.sort(low), np.sort(high)

    def events(ordered: np.ndarray) -> np.ndarray:
        at_least = ordered.size - np.searchsorted(ordered, thresholds, side="left")
        return np.concatenate([at_least, np.searchsorted(ordered, thresholds, side="right")])

    a, b = events(ordered_low), events(ordered_high)
    alpha = ALPHA / (4 * a.size)
    upper_a, lower_a = stats.beta.ppf(1 - alpha, a + 1, N - a), stats.beta.ppf(alpha, a, N - a + 1)
    upper_b, lower_b = stats.beta.ppf(1 - alpha, b + 1, N - b), stats.beta.ppf(alpha, b, N - b + 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.concatenate(
            [np.log((lower_b - DELTA) / upper_a), np.log((lower_a - DELTA) / upper_b)]
        )
    return float(np.nanmax(ratios))


def zcdp_epsilon(rho: float, delta: float) -> float:
    return rho + 2 * math.sqrt(rho * math.log(1 / delta))


def test_audit_of_the_summed_shares_stays_within_zcdp() -> None:
    """False-alarm rate ≤ 1e-6 (ALPHA)."""
    sigma2 = share_sigma2(Fraction(1, 8), 3, 1, 1, 1)
    assert audit_lower_bound(sigma2, 3, seed=41) <= zcdp_epsilon(1 / 8, DELTA)


def test_audit_catches_shares_that_forget_to_split_over_honest_sites() -> None:
    """A broken split (each of 3 sites adding a ninth of the variance) must be flagged."""
    sigma2 = share_sigma2(Fraction(1, 8), 3, 1, 1, 1) / 9
    assert audit_lower_bound(sigma2, 3, seed=43) > zcdp_epsilon(1 / 8, DELTA)


@pytest.mark.parametrize(
    ("sigma2", "honest"), [(Fraction(1, 4), 2), (Fraction(1, 2), 3), (Fraction(1), 5)]
)
def test_the_bound_dominates_the_exact_renyi_divergences(sigma2: Fraction, honest: int) -> None:
    """An independent check of the bound as used (d = 1, Δ1 = Δ2 = 1), from the exact law of the
    sum, where small shares make it least Gaussian: D_α(Y ‖ Y + 1) ≤ α·kls_rho from α = 1.01 up
    to where the terms that dominate D_α (near z ≈ α) are still far above float64's underflow
    (α² < 600·nσ², so p(α) > e^{−300})."""
    z = np.arange(-300, 301)
    p = summed_gaussian_pmf(sigma2, honest, z)
    q = np.roll(p, 1)  # the law of Y + 1
    keep = (p > 0) & (q > 0)
    log_p, log_ratio = np.log(p[keep]), np.log(p[keep]) - np.log(q[keep])
    bound = float(kls_rho(sigma2, honest, 1, 1, 1))
    reach = math.sqrt(600 * honest * float(sigma2))
    alphas = [a for a in (1.01, 1.5, 2, 3, 5, 10, 20) if a < reach]
    assert len(alphas) >= 5
    for alpha in alphas:
        divergence = float(logsumexp(log_p + (alpha - 1) * log_ratio)) / (alpha - 1)
        assert divergence <= alpha * bound * (1 + 1e-9), alpha


def test_the_gaussian_term_alone_would_understate_small_shares() -> None:
    """The check above can fail: for two shares of σ² = 1/4 the exact D_α near α = 1 is above
    α·Δ2²/(2nσ²), the bound of one discrete Gaussian of the summed variance; KLS's extra term is
    what covers it."""
    z = np.arange(-300, 301)
    p = summed_gaussian_pmf(Fraction(1, 4), 2, z)
    q = np.roll(p, 1)
    keep = (p > 0) & (q > 0)
    log_p, log_ratio = np.log(p[keep]), np.log(p[keep]) - np.log(q[keep])
    divergence = float(logsumexp(log_p + 0.01 * log_ratio)) / 0.01
    assert divergence > 1.01 * 1.0  # Δ2²/(2nσ²) = 1


# --------------------------------------------------------------------------- margins of a sum


def test_a_law_of_several_shares_is_the_sum_of_their_draws() -> None:
    """`NoiseLaw(parties=n)` (a consortium's level noise): its variance and margin of error are
    the sum's exact ones, a level draws n shares and adds them, and only Gaussian noise is split
    into shares."""
    law = NoiseLaw.gaussian(Fraction(1, 3), parties=5)
    assert law.variance == summed_gaussian_variance(Fraction(1, 3), 5)
    assert law.moe95 == summed_gaussian_moe95(Fraction(1, 3), 5)
    assert law.variance != pytest.approx(NoiseLaw.gaussian(Fraction(5, 3)).variance)  # not N_Z
    assert law != NoiseLaw.gaussian(Fraction(1, 3))
    with pytest.raises(ValueError, match="not split into shares"):
        NoiseLaw.laplace(2, parties=2)
    level = LevelNoise(
        mechanism=Mechanism.GAUSSIAN,
        granularity=Fraction(1),
        sensitivity_units=1,
        derivation="test",
        loss=PrivacyLoss.zcdp(Fraction(1, 10)),
        sigma2_units=Fraction(1, 3),
        parties=5,
    )
    drawn = level.draw(200_000, NoiseSource.seeded_for_tests(33))
    z = np.arange(-400, 401)
    assert chi2_pvalue_of_pmf(drawn, z, summed_gaussian_pmf(Fraction(1, 3), 5, z)) > P_THRESHOLD


def _within(row: np.ndarray, cells: NoiseLaw, total: NoiseLaw, h: float) -> float:
    """P(|c_a·Z_a + c_b·Z_b + c_T·Z_T| ≤ h) exactly (up to mass below e^{−800} left out), Z_a,
    Z_b of `cells` and Z_T of `total`, each the sum of its law's parties' shares (exact pmf)."""
    z = np.arange(-400, 401)
    pa = summed_gaussian_pmf(cells.sigma2, cells.parties, z)
    pt = summed_gaussian_pmf(total.sigma2, total.parties, z)
    pairs = (row[0] * z[:, None] + row[1] * z[None, :]).ravel()
    order = np.argsort(pairs)
    values = pairs[order]
    cumulative = np.concatenate([[0.0], np.cumsum((pa[:, None] * pa[None, :]).ravel()[order])])
    upper = np.searchsorted(values, h - row[2] * z, side="right")
    lower = np.searchsorted(values, -h - row[2] * z, side="left")
    return float(pt @ (cumulative[upper] - cumulative[lower]))


def _shares(sigma2: Fraction, parties: int) -> NoiseLaw:
    return NoiseLaw.gaussian(sigma2, parties=parties)


@pytest.mark.parametrize(
    ("cells", "total"),
    [
        (_shares(Fraction(1, 4), 3), _shares(Fraction(1, 4), 3)),
        (_shares(Fraction(1, 3), 5), _shares(Fraction(3, 4), 5)),
        (_shares(Fraction(2), 4), _shares(Fraction(1, 2), 4)),
    ],
)
def test_margins_of_a_table_of_summed_shares_are_exact(cells: NoiseLaw, total: NoiseLaw) -> None:
    """Two cells and their total, each level's noise the sum of several small shares (lattice
    laws that no one discrete Gaussian is): for every released value P(|E| ≤ h) ≥ 0.95 exactly
    (E from `consistent`'s own coefficients, the law of E by enumeration), and P(|E| ≤ h −
    1.6%·max(sd, max|c|)) < 0.95, so h is the exact quantile as closely as for central laws."""
    levels = Levels.build(pl.DataFrame({"cell": ["a", "b"]}), [[]])
    laws = [cells, total]
    bounds = np.cumsum(levels.sizes)[:-1]
    columns = [
        np.concatenate(consistent(levels, np.split(unit, bounds), laws).values)
        for unit in np.eye(3)
    ]
    coefficients = np.column_stack(columns)  # rows: a, b, total; columns: Z_a, Z_b, Z_T
    margins = np.concatenate(moe95(levels, laws))
    for row, h in zip(coefficients, margins, strict=True):
        variances = [cells.variance, cells.variance, total.variance]
        sd = math.sqrt(sum(c * c * v for c, v in zip(row, variances, strict=True)))
        assert _within(row, cells, total, float(h)) >= 0.95
        slack = 0.016 * max(sd, float(np.abs(row).max()))
        assert _within(row, cells, total, float(h) - slack) < 0.95
