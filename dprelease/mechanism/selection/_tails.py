"""Tails of the exact discrete laws: proved upper bounds (for δ) and floats (for the planner).

Discrete Laplace with scale b (P(Z = z) ∝ e^{−|z|/b}, q = e^{−1/b}):
P(Z = z) = (1 − q)/(1 + q)·q^{|z|}, so for j ≥ 1, P(Z ≥ j) = q^j/(1 + q) exactly, and
P(Z ≥ j) = 1 − q^{1−j}/(1 + q) for j ≤ 0.

Discrete Gaussian with variance parameter σ² (P(Z = z) = e^{−z²/(2σ²)}/Θ): for j ≥ 1,
P(Z ≥ j) = Σ_{z≥j} e^{−z²/(2σ²)}/Θ. Upper bound: the terms below σ one by one, the rest by an
integral (`gaussian_tail_upper`), over Θ ≥ √(2π)·σ: by Poisson summation
Θ = √(2π)σ·(1 + 2Σ_{k≥1} e^{−2π²σ²k²}) (see `noise._gaussian_law`), and the bracket is ≥ 1. So the
bound never falls below the true tail, and exceeds it by about 1e-4 relative at the tails δ
needs (Sampford's bound on the Mills ratio) and by e^{−2π²σ²} from Θ.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache

import numpy as np

from dprelease.mechanism.selection._real import (
    DIGITS,
    as_fraction,
    ceiling_context,
    exp_bounds,
    floor_context,
    pi_bounds,
    rational_bounds,
    sqrt_bounds,
)


@lru_cache(maxsize=4096)
def laplace_tail_upper(scale: Fraction, j: int) -> Fraction:
    """A rational ≥ P(Z ≥ j) for the discrete Laplace of scale b = `scale`, j ≥ 1 (exactly
    q^j/(1 + q), each end rounded outward)."""
    if j < 1:
        raise ValueError("the proved tail is for j ≥ 1")
    up = ceiling_context()
    _, qj_hi = exp_bounds(-Fraction(j) / scale)
    q_lo, _ = exp_bounds(-1 / scale)
    return as_fraction(up.divide(qj_hi, floor_context().add(1, q_lo)))


def laplace_tail(scale: Fraction, j: int | np.ndarray) -> np.ndarray:
    """P(Z ≥ j) in floating point (for the planner's tables, never for δ)."""
    b = float(scale)
    q = math.exp(-1 / b)
    j = np.atleast_1d(np.asarray(j, dtype=np.float64))
    upper = np.exp(-np.maximum(j, 1) / b) / (1 + q)
    lower = 1 - np.exp(-np.maximum(1 - j, 1) / b) / (1 + q)
    return np.where(j >= 1, upper, lower)


def _term_bounds(sigma2: Fraction, start: int, count: int) -> tuple[Decimal, Decimal]:
    """Lower and upper bounds on Σ_{z=start}^{start+count−1} e^{−z²/(2σ²)}, start ≥ 0.

    One `exp` per end for the first term and two for the ratios, then products only:
    f(z + 1) = f(z)·r_z with r_z = e^{−(2z+1)/(2σ²)} = r_{z−1}·e^{−1/σ²}. Every factor is
    positive, so multiplying lower ends rounded down (upper ends rounded up) keeps each end on
    its side; 50 digits lose about one per 10⁴ products."""
    down, up = floor_context(), ceiling_context()
    if count <= 0:
        return down.plus(0), up.plus(0)
    term_lo, term_hi = exp_bounds(-Fraction(start * start) / (2 * sigma2))
    ratio_lo, ratio_hi = exp_bounds(-Fraction(2 * start + 1) / (2 * sigma2))
    step_lo, step_hi = exp_bounds(-1 / sigma2)
    total_lo, total_hi = down.plus(term_lo), up.plus(term_hi)
    for _ in range(count - 1):
        term_lo, term_hi = down.multiply(term_lo, ratio_lo), up.multiply(term_hi, ratio_hi)
        ratio_lo, ratio_hi = down.multiply(ratio_lo, step_lo), up.multiply(ratio_hi, step_hi)
        total_lo, total_hi = down.add(total_lo, term_lo), up.add(total_hi, term_hi)
    return total_lo, total_hi


def _gaussian_terms(sigma2: Fraction, start: int, count: int) -> tuple[Fraction, int]:
    """An upper bound on Σ_{z=start}^{start+count−1} e^{−z²/(2σ²)}, and the next z."""
    return as_fraction(_term_bounds(sigma2, start, count)[1]), start + count


def _theta_lower(sigma2: Fraction) -> Fraction:
    """A rational ≤ Θ = Σ_z e^{−z²/(2σ²)}: √(2π)·σ (and Θ ≥ 1, its z = 0 term)."""
    down = floor_context()
    pi_lo, _ = pi_bounds()
    s2_lo, _ = rational_bounds(sigma2)
    root_lo, _ = sqrt_bounds(down.multiply(down.multiply(2, pi_lo), s2_lo))
    return max(as_fraction(root_lo), Fraction(1))


def _integral_upper(sigma2: Fraction, k: int) -> Fraction:
    """A rational ≥ ∫_{k−1/2}^∞ e^{−x²/(2σ²)} dx = σ·e^{−t²/2}·R(t), t = (k − 1/2)/σ, R the Mills
    ratio, with Sampford's bound R(t) < 4/(3t + √(t² + 8)) (Sampford 1953, Ann. Math. Statist.
    24; within 1e-4 relative at t = 5; `tests/unit/test_selection_exact.py` checks it
    numerically). R is decreasing, so the smallest t (σ rounded up) gives the largest bound."""
    down, up = floor_context(), ceiling_context()
    _, s2_hi = rational_bounds(sigma2)
    _, sigma_hi = sqrt_bounds(s2_hi)
    t_lo = down.divide(Decimal(2 * k - 1), down.multiply(2, sigma_hi))
    root_lo, _ = sqrt_bounds(down.add(down.multiply(t_lo, t_lo), 8))
    mills_hi = up.divide(4, down.add(down.multiply(3, t_lo), root_lo))
    _, first_hi = exp_bounds(-Fraction((2 * k - 1) ** 2, 8) / sigma2)
    return as_fraction(up.multiply(up.multiply(sigma_hi, first_hi), mills_hi))


#: Terms summed one by one at most before the integral takes over (a tail from below σ).
_HEAD_LIMIT = 512
#: Up to this σ², 4σ + 8 more terms are summed exactly before the integral, whose excess over the
#: sum (about (t² − 1)/(24σ²) relative) would otherwise show at small σ (1% at σ = 10), and with
#: them the Mills-ratio bounds' error (1e-4 to 1e-3 relative at t = 5) falls below e^{−8t}: a
#: δ that is a difference of two tails (`_gaussian_pure`) needs both to many digits. The terms
#: cost one product each (`_term_bounds`).
_EXACT_HEAD_MAX_SIGMA2 = 4096**2


@lru_cache(maxsize=4096)
def gaussian_tail_upper(sigma2: Fraction, j: int) -> Fraction:
    """A rational ≥ P(Z ≥ j) for the discrete Gaussian of variance parameter σ², j ≥ 1.

    f(x) = e^{−x²/(2σ²)} is convex for x ≥ σ (f'' = f·(x² − σ²)/σ⁴), so there each term is at most
    the integral over the unit interval around it (Hermite–Hadamard): Σ_{z≥k} f(z) ≤
    ∫_{k−1/2}^∞ f once k − 1/2 ≥ σ. Terms from j up to that k are summed one by one (at most 512;
    a tail starting further below σ is bounded by 1, never needed for a δ below 1/2 that far),
    and for σ ≤ 4096 another 4σ + 8 terms, so the bound is tight to about 1e-12 relative.
    All over Θ's lower bound √(2π)σ."""
    if j < 1:
        raise ValueError("the proved tail is for j ≥ 1")
    k = max(j, _convex_from(sigma2))
    if k - j > _HEAD_LIMIT:
        return Fraction(1)
    if sigma2 <= _EXACT_HEAD_MAX_SIGMA2:  # the integral's excess ~ (t² − 1)/(24σ²): sum past it
        k += 4 * math.isqrt(math.ceil(sigma2)) + 8
    head, _ = _gaussian_terms(sigma2, j, k - j)
    return min(Fraction(1), (head + _integral_upper(sigma2, k)) / _theta_lower(sigma2))


def theta_upper(sigma2: Fraction) -> Fraction:
    """A rational ≥ Θ = Σ_z e^{−z²/(2σ²)}: by Poisson summation Θ = √(2π)σ·(1 + 2Σ_{k≥1} q^{k²})
    with q = e^{−2π²σ²} < 1, and Σ_{k≥1} q^{k²} ≤ Σ_{k≥1} q^k = q/(1 − q)."""
    up, down = ceiling_context(), floor_context()
    pi_lo, pi_hi = pi_bounds()
    s2_lo, s2_hi = rational_bounds(sigma2)
    exponent = as_fraction(down.multiply(down.multiply(2, down.multiply(pi_lo, pi_lo)), s2_lo))
    _, q_hi = exp_bounds(-exponent)
    bracket = up.add(1, up.divide(up.multiply(2, q_hi), down.subtract(1, q_hi)))
    _, root_hi = sqrt_bounds(up.multiply(up.multiply(2, pi_hi), s2_hi))
    return as_fraction(up.multiply(root_hi, bracket))


def _integral_lower(sigma2: Fraction, k: int) -> Fraction:
    """A rational ≤ ∫_k^∞ e^{−x²/(2σ²)} dx = σ·e^{−t²/2}·R(t), t = k/σ, with Birnbaum's bound
    R(t) > 2/(t + √(t² + 4)) on the Mills ratio (Birnbaum 1942, Ann. Math. Statist. 13). The
    bound falls with t, so t is rounded up (σ down)."""
    down, up = floor_context(), ceiling_context()
    s2_lo, _ = rational_bounds(sigma2)
    sigma_lo, _ = sqrt_bounds(s2_lo)
    t_hi = up.divide(Decimal(k), sigma_lo)
    _, root_hi = sqrt_bounds(up.add(up.multiply(t_hi, t_hi), 4))
    mills_lo = down.divide(2, up.add(t_hi, root_hi))
    first_lo, _ = exp_bounds(-Fraction(k * k) / (2 * sigma2))
    return as_fraction(down.multiply(down.multiply(sigma_lo, first_lo), mills_lo))


@lru_cache(maxsize=4096)
def gaussian_tail_lower(sigma2: Fraction, j: int) -> Fraction:
    """A rational ≤ P(Z ≥ j) for the discrete Gaussian of variance parameter σ², j ≥ 1.

    f(x) = e^{−x²/(2σ²)} is convex for x ≥ σ, so there ∫_z^{z+1} f ≤ (f(z) + f(z + 1))/2 and
    summing, Σ_{z≥k} f(z) ≥ ∫_k^∞ f + f(k)/2 for k ≥ σ. Terms from j up to such a k are summed
    (lower ends; for σ ≤ 4096 another 4σ + 8 of them, as `gaussian_tail_upper` does), all over
    Θ's upper bound (`theta_upper`)."""
    if j < 1:
        raise ValueError("the proved tail is for j ≥ 1")
    k = max(j, _convex_from(sigma2))
    if k - j > _HEAD_LIMIT:
        return Fraction(0)
    if sigma2 <= _EXACT_HEAD_MAX_SIGMA2:
        k += 4 * math.isqrt(math.ceil(sigma2)) + 8
    total, _ = _term_bounds(sigma2, j, k - j)
    half_term = as_fraction(exp_bounds(-Fraction(k * k) / (2 * sigma2))[0]) / 2
    numerator = as_fraction(total) + _integral_lower(sigma2, k) + half_term
    return numerator / theta_upper(sigma2)


def _convex_from(sigma2: Fraction) -> int:
    """The smallest integer k ≥ 1 with k − 1/2 ≥ σ, i.e. (2k − 1)² ≥ 4σ²."""
    k = max(1, math.isqrt(math.floor(4 * sigma2)) // 2)
    while (2 * k - 1) ** 2 < 4 * sigma2:
        k += 1
    return k


def gaussian_tail(sigma2: Fraction, j: int | np.ndarray) -> np.ndarray:
    """P(Z ≥ j) in floating point (for the planner's tables, never for δ): the sum itself for
    σ² ≤ 10⁴; above, the midpoint rule P(Z ≥ j) ≈ P(N(0, σ²) ≥ j − 1/2), whose relative error
    is of order 1/σ² (Θ = √(2π)σ to double precision there)."""
    from dprelease.mechanism.noise import gaussian_law

    s2 = float(sigma2)
    j = np.atleast_1d(np.asarray(j, dtype=np.int64))
    out = np.empty(j.shape, dtype=np.float64)
    if s2 > 1e4:
        scale = math.sqrt(2 * s2)
        for i, start in enumerate(j.tolist()):
            out[i] = 0.5 * math.erfc((start - 0.5) / scale)
        return out
    theta = gaussian_law(sigma2).mass
    reach = int(40 * math.sqrt(s2)) + 40
    for i, start in enumerate(j.tolist()):
        k = start if start >= 1 else 1 - start  # P(Z ≥ j) = 1 − P(Z ≥ 1 − j) for j ≤ 0
        z = np.arange(k, k + reach, dtype=np.float64)
        tail = math.fsum(np.exp(-(z * z) / (2 * s2))) / theta
        out[i] = tail if start >= 1 else 1 - tail
    return out


__all__ = [
    "DIGITS",
    "gaussian_tail",
    "gaussian_tail_lower",
    "gaussian_tail_upper",
    "laplace_tail",
    "laplace_tail_upper",
]
