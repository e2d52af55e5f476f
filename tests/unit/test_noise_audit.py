"""Empirical privacy audit of the noise: does the released count leak more than ε?

Neighbouring inputs are counts 100 and 101 (sensitivity 1, scale 1/ε). For every threshold
event {output ≥ T} and {output ≤ T} near the counts, Clopper–Pearson intervals bound the two
event probabilities, and ln(lower(P_a)/upper(P_b)) is a lower bound on the privacy loss that
holds with high confidence. A correct mechanism must never show a lower bound above ε; a
mechanism with 30% too little noise must be caught, which shows the audit has power.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dprelease.mechanism.noise import NoiseSource, discrete_gaussian, discrete_laplace

N = 1_000_000
# Total false-alarm rate of one audit (a correct mechanism failing), split by Bonferroni over
# every Clopper–Pearson bound it computes.
ALPHA = 1e-6


def event_counts(releases: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Counts of {Y ≥ T} and of {Y ≤ T} for each threshold T, stacked."""
    ordered = np.sort(releases)
    at_least = ordered.size - np.searchsorted(ordered, thresholds, side="left")
    at_most = np.searchsorted(ordered, thresholds, side="right")
    return np.concatenate([at_least, at_most])


def epsilon_lower_bound(scale: float, epsilon: float, seed: int) -> float:
    """Release 100 + Z and 101 + Z N times each; return the audit's lower bound on ε."""
    source = NoiseSource.seeded_for_tests(seed)
    low = 100 + discrete_laplace(scale, N, source)
    high = 101 + discrete_laplace(scale, N, source)
    width = math.ceil(3 / epsilon)
    thresholds = np.arange(100 - width, 102 + width)
    counts_low, counts_high = event_counts(low, thresholds), event_counts(high, thresholds)
    alpha = ALPHA / (4 * counts_low.size)  # 2 bounds × 2 directions per event
    upper = stats.beta.ppf(1 - alpha, counts_low + 1, N - counts_low)
    lower = stats.beta.ppf(alpha, counts_low, N - counts_low + 1)
    upper_h = stats.beta.ppf(1 - alpha, counts_high + 1, N - counts_high)
    lower_h = stats.beta.ppf(alpha, counts_high, N - counts_high + 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.concatenate([np.log(lower_h / upper), np.log(lower / upper_h)])
    return float(np.nanmax(ratios))


@pytest.mark.parametrize("epsilon", [0.1, 1.0])
def test_audit_finds_no_excess_privacy_loss(epsilon: float) -> None:
    """False-alarm rate ≤ 1e-6 (ALPHA)."""
    eps_lb = epsilon_lower_bound(1 / epsilon, epsilon, seed=21)
    assert eps_lb <= epsilon
    assert eps_lb > 0.8 * epsilon  # the audit is tight: discrete Laplace attains ε exactly


@pytest.mark.parametrize("epsilon", [0.1, 1.0])
def test_audit_catches_too_little_noise(epsilon: float) -> None:
    """A broken mechanism (scale 0.7/ε, true loss ε/0.7) must be flagged."""
    assert epsilon_lower_bound(0.7 / epsilon, epsilon, seed=22) > epsilon


# --------------------------------------------------------------------------- discrete Gaussian
# Neighbours 100 and 101 (Δ = 1) with σ² = 4: ρ = Δ²/(2σ²) = 1/8-zCDP, which gives
# (ε(δ), δ)-DP with ε(δ) = ρ + 2√(ρ·ln(1/δ)). For each threshold event S and δ = 1e-3,
# ln((lower(P_a(S)) − δ) / upper(P_b(S))) is a lower bound on ε at that δ.

GAUSS_SIGMA2 = 4
DELTA = 1e-3


def zcdp_epsilon(rho: float, delta: float) -> float:
    return rho + 2 * math.sqrt(rho * math.log(1 / delta))


def gaussian_epsilon_lower_bound(sigma2: float, seed: int) -> float:
    """Release 100 + Z and 101 + Z N times each; the audit's lower bound on ε at δ = DELTA."""
    source = NoiseSource.seeded_for_tests(seed)
    low = 100 + discrete_gaussian(sigma2, N, source)
    high = 101 + discrete_gaussian(sigma2, N, source)
    thresholds = np.arange(80, 122)
    counts_low, counts_high = event_counts(low, thresholds), event_counts(high, thresholds)
    alpha = ALPHA / (4 * counts_low.size)  # 2 bounds × 2 directions per event
    upper = stats.beta.ppf(1 - alpha, counts_low + 1, N - counts_low)
    lower = stats.beta.ppf(alpha, counts_low, N - counts_low + 1)
    upper_h = stats.beta.ppf(1 - alpha, counts_high + 1, N - counts_high)
    lower_h = stats.beta.ppf(alpha, counts_high, N - counts_high + 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.concatenate(
            [np.log((lower_h - DELTA) / upper), np.log((lower - DELTA) / upper_h)]
        )
    return float(np.nanmax(ratios))


def exact_best_epsilon(sigma2: float) -> float:
    """The largest ln((P_a(S) − δ)/P_b(S)) over the audit's events, from the exact pmf."""
    z = np.arange(-200, 201)
    pmf = np.exp(-(z**2) / (2 * sigma2))
    pmf /= pmf.sum()
    at_most = np.cumsum(pmf)  # P(Z ≤ z)
    best = -math.inf
    for threshold in range(80, 122):
        for a, b in ((101, 100), (100, 101)):  # P(a + Z ≥ T) vs P(b + Z ≥ T), and ≤ T
            ge_a, ge_b = 1 - at_most[threshold - a - 1 + 200], 1 - at_most[threshold - b - 1 + 200]
            le_a, le_b = at_most[threshold - a + 200], at_most[threshold - b + 200]
            for p_a, p_b in ((ge_a, ge_b), (le_a, le_b)):
                if p_a > DELTA and p_b > 0:
                    best = max(best, math.log((p_a - DELTA) / p_b))
    return best


def test_gaussian_audit_stays_within_zcdp() -> None:
    """False-alarm rate ≤ 1e-6 (ALPHA). The audit is sharp: it finds at least 80% of the best
    loss that its events can show at this δ, so the bound is not passed for lack of power."""
    eps_lb = gaussian_epsilon_lower_bound(GAUSS_SIGMA2, seed=23)
    assert eps_lb <= zcdp_epsilon(1 / (2 * GAUSS_SIGMA2), DELTA)
    assert eps_lb > 0.8 * exact_best_epsilon(GAUSS_SIGMA2)


def test_gaussian_audit_catches_too_little_noise() -> None:
    """A broken mechanism that draws σ² = 0.1 while claiming σ² = 4 must be flagged."""
    eps_lb = gaussian_epsilon_lower_bound(0.1, seed=24)
    assert eps_lb > zcdp_epsilon(1 / (2 * GAUSS_SIGMA2), DELTA)
