"""Distributed discrete Gaussian noise: each of n parties adds an exact discrete Gaussian share,
and the released noise is their sum (Kairouz, Liu & Steinke 2021, "The Distributed Discrete
Gaussian Mechanism for Federated Learning with Secure Aggregation").

Why this law and not another: the sum of n iid N_Z(0, σ²) is not itself a discrete Gaussian, but
its privacy is bounded directly (KLS 2021, Theorem 1 and Proposition 14, `dprelease.consortium`
states the bound used), so the law the proof assumes is exactly what is drawn: n independent
shares, each from the exact sampler of `_gaussian` (Canonne, Kamath & Steinke 2020, Algorithm 3:
integer arithmetic, bits from the `NoiseSource`). Nothing new is sampled here; what is new is the
law of the sum, which the tests check draws against (χ² on `summed_gaussian_pmf`) and which the
margins of error of a consortium release are read from.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import numpy as np

from dprelease.mechanism.noise._gaussian import discrete_gaussian, exact_sigma2
from dprelease.mechanism.noise._gaussian_law import gaussian_law
from dprelease.mechanism.noise._source import NoiseSource

#: The pmf of a share is kept out to this many σ (its mass beyond is below e^{-40²/2}).
_REACH_SIGMAS = 40
#: From this share σ² on, the sum of n shares and N_Z(0, n·σ²) have characteristic functions
#: within 2n·e^{−2π²σ²} ≤ 2n·1.9e-26 of each other on [−π, π] (Poisson summation, as in
#: `_gaussian_law`), so their pmfs agree to far below float64's rounding: the sum's margin of
#: error is read from the discrete Gaussian's exact law, without convolving millions of terms.
_CONVOLVE_BELOW = 3


def distributed_gaussian_share(
    sigma2: Fraction | int, size: int, source: NoiseSource | None = None
) -> np.ndarray:
    """One party's share: `size` exact draws of N_Z(0, σ²), σ² = exact_sigma2(sigma2), as int64.

    The same exact sampler as a central release; only its parameter differs (σ² of the total
    over the number of parties it is split between)."""
    return discrete_gaussian(sigma2, size, source)


def _share_pmf(sigma2: Fraction) -> tuple[int, np.ndarray]:
    """(h, pmf over −h..h) of one N_Z(0, σ²) share in float64; the mass left out is below
    e^{−800}."""
    law = gaussian_law(exact_sigma2(sigma2))
    h = max(1, math.ceil(_REACH_SIGMAS * math.sqrt(float(law.sigma2))))
    z = np.arange(-h, h + 1, dtype=float)
    weights = np.exp(-(z**2) / (2 * float(law.sigma2)))
    return h, weights / law.mass


@lru_cache(maxsize=64)
def _sum_pmf(sigma2: Fraction, parties: int) -> tuple[int, np.ndarray]:
    """(h, pmf over −h..h) of the sum of `parties` iid shares (repeated convolution)."""
    h, one = _share_pmf(sigma2)
    total = one
    for _ in range(parties - 1):
        total = np.convolve(total, one)
    return h * parties, total


def summed_gaussian_pmf(sigma2: Fraction | int, parties: int, support: np.ndarray) -> np.ndarray:
    """P(Z_1 + … + Z_n = z) at each integer of `support`, Z_i iid N_Z(0, σ²), in float64: the
    exact law of distributed discrete Gaussian noise (up to float rounding, and mass below
    e^{−800} left out of each share)."""
    if parties < 1:
        raise ValueError(f"parties must be at least 1, got {parties}")
    h, pmf = _sum_pmf(exact_sigma2(sigma2), parties)
    z = np.asarray(support, dtype=np.int64)
    inside = np.abs(z) <= h
    out = np.zeros(z.shape, dtype=float)
    out[inside] = pmf[z[inside] + h]
    return out


def summed_gaussian_variance(sigma2: Fraction | int, parties: int) -> float:
    """Var(Z_1 + … + Z_n) = n · Var N_Z(0, σ²) (slightly below n·σ²)."""
    return parties * gaussian_law(exact_sigma2(sigma2)).variance


def summed_gaussian_moe95(sigma2: Fraction | int, parties: int) -> int:
    """The smallest integer h with P(|Z_1 + … + Z_n| ≤ h) ≥ 0.95 (from the float pmf, erring
    up by one where the tail is within 1e-12 of 5%, never down)."""
    exact = exact_sigma2(sigma2)
    if parties == 1 or exact >= _CONVOLVE_BELOW:
        return gaussian_law(exact * parties).abs_quantile95()
    h, pmf = _sum_pmf(exact, parties)
    # tail(k) = P(|Z| > k) = 2·P(Z > k) by symmetry; summed from the far end, so it is accurate
    upper = pmf[h + 1 :][::-1].cumsum()[::-1]  # upper[k] = P(Z > k), k = 0..h−1
    tails = 2 * upper
    passing = np.flatnonzero(tails <= 0.05 * (1 - 1e-12))
    return int(passing[0]) if passing.size else h
