"""The discrete Gaussian's law in floating point: what variances and margins of error need of it.

Z takes integer values with P(Z = z) = e^{−z²/(2σ²)}/Θ, Θ = Σ_z e^{−z²/(2σ²)} (Canonne, Kamath &
Steinke 2020), σ² the exact rational the sampler used. Every quantity below is a ratio of sums of
that kind, and each sum is computed one of two ways, whichever converges at once:

- Directly (σ² ≤ 1/2): over z = 1..n, n = ⌊√(1 + 90σ²)⌋, so the first term left out is below
  e^{−45} = 2.9e-20 of the largest (e^{−((n+1)² − 1)/(2σ²)} < e^{−45}).
- Over the dual lattice (σ² > 1/2), by Poisson summation:
  Σ_z e^{−(z−c)²/(2σ²)} = √(2π)σ · T(c),  T(c) = 1 + 2 Σ_{k≥1} a_k cos(2πkc),  a_k = e^{−2π²σ²k²}.
  k ≤ 3; the first term left out, a_4 ≤ e^{−16π²} = 1.5e-69, is far below rounding.

From the dual form the cumulant generating function is exact in closed form:
log E e^{uZ} = σ²u²/2 + log(T(uσ²)/T(0)) (complete the square), so with T₀ = T(0)

    Var Z = σ²(1 − 8π²σ² Σ k²a_k / T₀) < σ²,
    κ₄(Z) = 32π⁴σ⁸ (Σ k⁴a_k / T₀ − 6 (Σ k²a_k / T₀)²),

and as T(c) ≤ T₀ (it peaks at integers), log E e^{uZ} ≤ σ²u²/2 for every real u: the discrete
Gaussian is σ²-subgaussian (CKS 2020), its moment generating function finite everywhere. Its
characteristic function is, by the same summation,

    φ(s) = Σ_k e^{−σ²(s − 2πk)²/2} / T₀ > 0,

positive (so log φ is real) and 2π-periodic: the law lives on a lattice of span 1. For σ² ≥ 3
Var Z equals σ² in float64 (8π²σ²a₁ < 1e-22) and κ₄ is below 1e-15·σ⁴; σ² from 1e-2 to 1e12 (and
beyond) is handled without overflow or cancellation: sums of positive terms only, except the
direct characteristic function 1 − 4Σ e^{−z²/(2σ²)} sin²(zs/2)/Θ ≥ 0.17 and the direct κ₄.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache
from statistics import NormalDist

import numpy as np

# Sums run directly over z up to this σ², over the dual lattice above it (see the docstring).
_DIRECT_MAX_SIGMA2 = 0.5
_NEGLIGIBLE = 45.0  # terms below e^{-45} of the leading one are left out
_DUAL_TERMS = 3
# The exact quantile sums e^{-z²/(2σ²)} in chunks of this many terms, so memory stays bounded.
_CHUNK = 1 << 20
# A tail this close to 5% (relative) is beyond float64's word: the quantile then errs up by one.
_TIE = 1e-12
_Z975 = NormalDist().inv_cdf(0.975)


class DiscreteGaussian:
    """The discrete Gaussian of variance parameter σ² (a float view of the exact σ²)."""

    def __init__(self, sigma2: float) -> None:
        if not sigma2 > 0 or not math.isfinite(sigma2):
            raise ValueError(f"σ² must be positive and finite, got {sigma2!r}")
        self.sigma2 = sigma2
        self.direct = sigma2 <= _DIRECT_MAX_SIGMA2
        if self.direct:
            n = math.isqrt(int(1 + 2 * _NEGLIGIBLE * sigma2))
            self._z = np.arange(1, n + 1, dtype=float)
            self._w = np.exp(-(self._z**2) / (2 * sigma2))  # e^{−z²/(2σ²)}, z = 1..n
            self._log_theta = math.log1p(2 * float(self._w.sum()))
        else:
            self._k = np.arange(1, _DUAL_TERMS + 1, dtype=float)
            self._a = np.exp(-2 * math.pi**2 * sigma2 * self._k**2)  # a_k
            self._log_t0 = math.log1p(2 * float(self._a.sum()))
            # images k ≥ 2 of the characteristic function are below e^{−2π²σ²k(k−1)}
            self._images = 1 + sum(
                2 * math.pi**2 * sigma2 * k * (k - 1) < _NEGLIGIBLE
                for k in range(2, _DUAL_TERMS + 1)
            )

    @property
    def mass(self) -> float:
        """Θ = Σ_z e^{−z²/(2σ²)}, the pmf's normalising constant."""
        if self.direct:
            return math.exp(self._log_theta)
        return math.sqrt(2 * math.pi * self.sigma2) * math.exp(self._log_t0)

    @property
    def variance(self) -> float:
        """Var Z = E Z², below σ²."""
        if self.direct:
            return 2 * float(self._z**2 @ self._w) / math.exp(self._log_theta)
        t0 = math.exp(self._log_t0)
        return self.sigma2 * (1 - 8 * math.pi**2 * self.sigma2 * float(self._k**2 @ self._a) / t0)

    @property
    def fourth_cumulant(self) -> float:
        """κ₄(Z) = E Z⁴ − 3 (E Z²)²: positive, and far below σ⁴ once σ² ≳ 1."""
        if self.direct:
            theta = math.exp(self._log_theta)
            m2 = 2 * float(self._z**2 @ self._w) / theta
            m4 = 2 * float(self._z**4 @ self._w) / theta
            return m4 - 3 * m2**2
        t0 = math.exp(self._log_t0)
        s2 = float(self._k**2 @ self._a) / t0
        s4 = float(self._k**4 @ self._a) / t0
        return 32 * math.pi**4 * self.sigma2**4 * (s4 - 6 * s2**2)

    def log_cf(self, s: np.ndarray) -> np.ndarray:
        """log E e^{isZ} (real: Z is symmetric, and its characteristic function positive)."""
        if self.direct:
            inner = np.zeros_like(s)
            for z, w in zip(self._z, self._w, strict=True):
                inner += w * np.sin(z * s / 2) ** 2
            return np.log1p(-4 * inner / math.exp(self._log_theta))
        # r ∈ [−π, π] with r ≡ s (mod 2π); the images r − 2πk, k ≠ 0, relative to r's own term:
        # e^{−σ²((r−2πk)² − r²)/2} = e^{−2πσ²k(πk − r)} ≤ 1 (equal to 1 only at k = ±1, r = ±π).
        # Those below e^{−45} on all of s are left out: images k ≥ 2 once σ² ≥ 45/(4π²), and
        # every image (and the reduction) where |s| stays below π − 45/(2πσ²).
        reach = float(np.max(np.abs(s), initial=0.0))
        if 2 * np.pi * self.sigma2 * (np.pi - min(reach, np.pi)) >= _NEGLIGIBLE:
            return -0.5 * self.sigma2 * s**2 - self._log_t0
        r = s - 2 * np.pi * np.rint(s / (2 * np.pi))
        images = np.zeros_like(r)
        for k in range(1, self._images + 1):
            images += np.exp(-2 * np.pi * self.sigma2 * k * (np.pi * k - r))
            images += np.exp(-2 * np.pi * self.sigma2 * k * (np.pi * k + r))
        return -0.5 * self.sigma2 * r**2 + np.log1p(images) - self._log_t0

    def log_mgf(self, u: np.ndarray) -> np.ndarray:
        """log E e^{uZ}, finite for every real u, at most σ²u²/2."""
        c = self.sigma2 * u
        f = c - np.rint(c)  # Σ_z e^{−(z−c)²/(2σ²)} depends on c mod 1 only
        if self.direct:
            # Σ_j e^{−(j−f)²/(2σ²)} = e^{−f²/(2σ²)} Σ_j e^{−(j² − 2jf)/(2σ²)}, j² − 2jf ≥ 0.
            images = np.zeros_like(f)
            for j in range(1, self._z.size + 2):
                images += np.exp(-(j * j - 2 * j * f) / (2 * self.sigma2))
                images += np.exp(-(j * j + 2 * j * f) / (2 * self.sigma2))
            shifted = -(f**2) / (2 * self.sigma2) + np.log1p(images)
            return 0.5 * self.sigma2 * u**2 + shifted - self._log_theta
        t = np.zeros_like(f)
        for k, a in zip(self._k, self._a, strict=True):
            t += a * np.cos(2 * np.pi * k * f)
        return 0.5 * self.sigma2 * u**2 + np.log1p(2 * t) - self._log_t0

    def abs_quantile95(self) -> int:
        """The smallest integer h with P(|Z| ≤ h) ≥ 0.95.

        Exact up to float64's word: P(|Z| > h) = 2 Σ_{z>h} e^{−z²/(2σ²)}/Θ, from the closed-form
        Θ and the head of the sum added up pairwise in chunks, at the normal guess
        ⌈z₀.₉₇₅σ − 1/2⌉ (P(|Z| ≤ h) ≈ P(|N(0, σ²)| ≤ h + 1/2)), then one term at a time until h
        is the smallest that passes. A tail within 1e-12 (relative) of 5% counts as failing, so
        a tie too close for float64 to decide errs up by one, never down.
        """
        sigma = math.sqrt(self.sigma2)
        if self.direct:
            half_rest = float(self._w.sum())  # Σ_{z≥1} e^{−z²/(2σ²)} = (Θ − 1)/2
            theta = 1 + 2 * half_rest
        else:
            theta = math.sqrt(2 * math.pi) * sigma * math.exp(self._log_t0)
            half_rest = (theta - 1) / 2
        limit = 0.025 * theta * (1 - _TIE)  # h passes iff Σ_{z>h} e^{−z²/(2σ²)} ≤ limit

        def term(z: int) -> float:
            return math.exp(-(z * z) / (2 * self.sigma2))

        h = max(0, math.ceil(_Z975 * sigma - 0.5))
        tail = half_rest - self._head(h)
        while h > 0 and tail + term(h) <= limit:  # h − 1 passes too
            tail += term(h)
            h -= 1
        while tail > limit:
            h += 1
            tail -= term(h)
        return h

    def _head(self, h: int) -> float:
        """Σ_{z=1}^{h} e^{−z²/(2σ²)}, pairwise within chunks of _CHUNK terms."""
        chunks = []
        for start in range(1, h + 1, _CHUNK):
            z = np.arange(start, min(start + _CHUNK, h + 1), dtype=float)
            chunks.append(float(np.exp(-(z**2) / (2 * self.sigma2)).sum()))
        return math.fsum(chunks)


@lru_cache(maxsize=256)
def gaussian_law(sigma2: Fraction) -> DiscreteGaussian:
    """The float numerics of the discrete Gaussian at the exact σ², built once per σ²."""
    return DiscreteGaussian(float(sigma2))
