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

from dprelease.noise import NoiseSource, discrete_laplace

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
