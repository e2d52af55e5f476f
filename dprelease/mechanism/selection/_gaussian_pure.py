"""Discrete Gaussian thresholding in a pure scope: its proved (ε, δ), and its calibration.

Why: with units that touch up to G keys, per-key Δ-scaling (the optimal rule at ε/G each, or
Laplace noise of scale G/ε) has noise that grows with G, while a Gaussian's grows with √G: at
G = 5, ε = 0.347, δ = 10⁻⁶ a key held by 150 units (each holding five) is kept with probability
0.09 by the former and about 0.8 by a Gaussian threshold. Selection is (ε, δ)-DP in any case, so
a pure scope may use a Gaussian threshold as long as its (ε, δ) is *proved*; here it is, for the
project's exact discrete Gaussian (PRIVACY.md, key selection, the bullet *Discrete Gaussian
threshold in a pure scope*, steps 1–6, states the proof in full).

The rule: per candidate key, each unit holding it adds a weight w (each unit bounded to G keys),
an independent exact discrete Gaussian Z of variance parameter σ² is added, and the key is kept
iff the sum ≥ τ. A protected change brings ℓ ≤ G keys that only the protected unit holds
(lone keys) and moves the weights of at most m − ℓ keys both neighbours hold (m = G under
add/remove, 2G under substitution, with ℓ = max(ℓ₀, ℓ₁) there): the unit's ≤ G keys are split
between the two. It is (ε, δ)-DP with δ = max over ℓ = 0..G of δ₁(m − ℓ) + ℓ·P(Z ≥ τ − w)
(`split_delta`), where

- ℓ·P(Z ≥ τ − w) bounds the probability that any of ℓ lone keys is released (δ₂ = G·P(Z ≥ τ − w)
  at ℓ = G), and
- δ₁(s) bounds the hockey-stick divergence of s independent discrete Gaussians shifted by w each:
  the privacy loss is L = (sw² + 2wS)/(2σ²), S a sum of s iid discrete Gaussians, and
  δ₁ = E[(1 − e^{ε−L})₊]. δ₁ is not about lone keys: it is the shared keys' privacy-loss tail,
  so outside the lone-key event this release is (ε, δ₁)-DP, not ε-DP.

S's law: for Σz = x, ‖z‖² = x²/s + ‖z − (x/s)·1‖², so P(S = x) = e^{−x²/(2sσ²)}·C_{x mod s}/Θ^s
with C periodic in x of period s (z ↦ z + 1 maps the slice Σz = x onto Σz = x + s, keeping
z − (x/s)·1). Poisson summation over the lattice {Σz = 0} gives C_r = M·(1 + ξ_r), |ξ_r| ≤ η
with η ≤ θ(q)^{s−1} − 1, θ(q) = 1 + 2q/(1 − q), q = e^{−2π²σ²/s}; so P(S = x) ≤ κ·P(Z' = x),
κ = (1 + η)/(1 − η), Z' the discrete Gaussian of variance parameter sσ². Then, exactly for Z'
(e^{−L(x)}·P(Z' = x) = P(Z' = x + sw)),

    δ₁ ≤ κ·(P(Z' ≥ m) − e^ε·P(Z' ≥ m + sw)),   m = ⌊(εσ² − sw²/2)/w⌋ + 1,

the first tail bounded above and the second below with outward-rounded decimals (`_tails`). κ is
not assumed small: `sum_factor` computes it with outward rounding and δ₁ is multiplied by it. At
calibrated plans κ − 1 < 10⁻⁴⁰ (2·10⁻⁴⁷ at G = 20 under substitution: the 50-digit rounding
dominates the true η); κ matters only at σ² ≲ s, which calibration does not produce.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

from dprelease.mechanism.noise import exact_sigma2
from dprelease.mechanism.selection._real import (
    as_fraction,
    ceiling_context,
    exp_bounds,
    floor_context,
    pi_bounds,
    rational_bounds,
)
from dprelease.mechanism.selection._tails import gaussian_tail_lower, gaussian_tail_upper


def sum_factor(sigma2: Fraction, shifted: int) -> Fraction:
    """κ ≥ 1 with P(S = x) ≤ κ·P(Z' = x) for S the sum of `shifted` iid discrete Gaussians of
    variance parameter σ² and Z' the discrete Gaussian of variance parameter `shifted`·σ² (see
    the module docstring); ValueError when the bound η is not below 1/2."""
    if shifted == 1:
        return Fraction(1)
    up, down = ceiling_context(), floor_context()
    pi_lo, _ = pi_bounds()
    s2_lo, _ = rational_bounds(sigma2 / shifted)
    exponent = as_fraction(down.multiply(down.multiply(2, down.multiply(pi_lo, pi_lo)), s2_lo))
    _, q_hi = exp_bounds(-exponent)
    theta_hi = up.add(1, up.divide(up.multiply(2, q_hi), down.subtract(1, q_hi)))
    # θ^{s−1} by repeated products, each correctly rounded upward: `Context.power` is only
    # "almost always correctly rounded", so it would be the one step without a direction.
    power = theta_hi
    for _ in range(shifted - 2):
        power = up.multiply(power, theta_hi)
    eta = as_fraction(up.subtract(power, 1))
    if eta >= Fraction(1, 2):
        raise ValueError("σ² is too small for the sum bound")
    return (1 + eta) / (1 - eta)


@lru_cache(maxsize=1024)
def noise_delta(sigma2: Fraction, epsilon: Fraction, shifted: int, step: int = 1) -> Fraction:
    """A proved δ₁ ≥ sup_A P(A) − e^ε·Q(A) for the discrete Gaussian of variance parameter σ²
    added to weights that move by `step` in `shifted` coordinates (either direction: the loss
    has the same law both ways); 1 when the bound cannot say more, 0 when nothing is shifted."""
    if shifted == 0:
        return Fraction(0)
    m = math.floor((epsilon * sigma2 - Fraction(shifted * step * step, 2)) / step) + 1
    if m < 1:
        return Fraction(1)
    wide = sigma2 * shifted
    _, e_lo = exp_bounds(epsilon)
    bound = gaussian_tail_upper(wide, m) - as_fraction(e_lo) * gaussian_tail_lower(
        wide, m + shifted * step
    )
    return min(Fraction(1), max(Fraction(0), sum_factor(sigma2, shifted) * bound))


def noise_delta_float(sigma: float, epsilon: float, shifted: int, step: int = 1) -> float:
    """δ₁ in floating point: the bound of `noise_delta` with Z′'s tails by the midpoint rule
    (P(Z′ ≥ j) ≈ P(N(0, sσ²) ≥ j − 1/2); for the search only, never for a δ)."""
    if shifted == 0:
        return 0.0
    spread = sigma * math.sqrt(shifted) * math.sqrt(2)
    m = math.floor((epsilon * sigma * sigma - shifted * step * step / 2) / step) + 1
    if m < 1:
        return 1.0  # as `noise_delta`: that bound says nothing there
    first = 0.5 * math.erfc((m - 0.5) / spread)
    second = 0.5 * math.erfc((m + shifted * step - 0.5) / spread)
    return max(0.0, first - math.exp(epsilon) * second)


def split_delta(
    sigma2: Fraction, epsilon: Fraction, keys: int, shifted: int, step: int, tail: Fraction
) -> Fraction:
    """The proved δ of the whole selection: max over ℓ = 0..`keys` of δ₁(`shifted` − ℓ) + ℓ·tail,
    `tail` ≥ P(Z ≥ τ − w). A unit's ≤ G keys split into ℓ lone keys and at most m − ℓ shared
    ones it moves (under substitution ℓ = max(ℓ₀, ℓ₁) and s ≤ 2G − ℓ₀ − ℓ₁ ≤ m − ℓ); PRIVACY.md,
    step 6. Each term is an upper bound, so their maximum is."""
    return max(
        noise_delta(sigma2, epsilon, shifted - lone, step) + lone * tail for lone in range(keys + 1)
    )


#: Search arguments: ε, δ, the most lone keys, the shifted coordinates, the weight of one unit.
_Args = tuple[float, float, int, int, int]


def _slack(sigma: float, threshold: int, args: _Args) -> float:
    """max over ℓ of δ₁(m − ℓ) + ℓ·P(Z ≥ τ − w), minus δ, in floating point (the tail by the
    midpoint rule): `split_delta`'s bound, for the search."""
    epsilon, delta, keys, shifted, step = args
    tail = 0.5 * math.erfc((threshold - step - 0.5) / (sigma * math.sqrt(2)))
    worst = max(
        noise_delta_float(sigma, epsilon, shifted - lone, step) + lone * tail
        for lone in range(keys + 1)
    )
    return worst - delta


def _smallest_sigma(threshold: int, args: _Args) -> float | None:
    """The smallest σ at which threshold τ meets δ in floating point (None: no σ does).

    δ₁ falls and the lone keys' δ₂ grows with σ; the float δ₁ jumps where m does, so the first
    σ of a log grid up to τ that meets δ is found, then refined by bisection from below."""
    grid = [0.3 * (threshold / 0.3) ** (k / 400) for k in range(401)]
    for previous, sigma in zip(grid, grid[1:], strict=False):
        if _slack(sigma, threshold, args) <= 0:
            low, high = previous, sigma
            for _ in range(60):
                middle = math.sqrt(low * high)
                low, high = (middle, high) if _slack(middle, threshold, args) > 0 else (low, middle)
            return high
    return None


def _smallest_threshold(args: _Args) -> int:
    """The smallest τ that some σ meets δ at, in floating point."""
    threshold = 2
    while _smallest_sigma(threshold, args) is None:
        threshold *= 2
    low = threshold // 2
    while threshold - low > 1:
        middle = (low + threshold) // 2
        low, threshold = (low, middle) if _smallest_sigma(middle, args) else (middle, threshold)
    return threshold


#: The weight of one unit's count is 2^k ≤ 16 so that Z′'s σ (√s·σ in weight units) stays
#: below about 2048: a finer threshold (a key's count moves by the weight; τ falls on a grid
#: of 1/weight counts) with tails narrow enough to sum term by term (`_tails`).
_MAX_STEP = 16
_SIGMA_TARGET = 2048.0


@lru_cache(maxsize=256)
def calibrate(
    epsilon: Fraction, delta: Fraction, keys: int, shifted: int
) -> tuple[int, int, Fraction, Fraction, Fraction, Fraction]:
    """(w, τ, σ², δ₁(m), δ₂, bound): each unit adds weight w to a key it holds; τ (in weight
    units) is the smallest threshold found in floating point for which the proof of bound ≤ δ
    closes, bound = `split_delta` = max over ℓ of δ₁(m − ℓ) + ℓ·P(Z ≥ τ − w) (m = `shifted`;
    δ₁(m) alone, all the unit's keys shared, and δ₂ = `keys`·P(Z ≥ τ − w), any lone key
    released, are returned for the manifest), and σ² the first sampler value (from the
    float optimum up, in 0.1% steps) at which it does: both bounds proved, the minima not (a
    smaller τ or σ² might be provable; that costs utility, never privacy). A candidate whose
    proof fails moves σ² up, then τ up. Why w > 1: a threshold on counts is an integer, half a
    count coarser on average than a real one; with weight w it falls on a grid of 1/w counts.
    ValueError, saying what to change, when no candidate's proof closes."""
    base = (float(epsilon), float(delta), keys, shifted, 1)
    sigma = _smallest_sigma(_smallest_threshold(base), base) or 1.0
    step = 1
    while step < _MAX_STEP and 2 * step * sigma * math.sqrt(shifted) <= _SIGMA_TARGET:
        step *= 2
    args = (float(epsilon), float(delta), keys, shifted, step)
    threshold = _smallest_threshold(args)
    for tau in range(threshold, threshold + 16 * step, max(1, step // 4)):
        found = _smallest_sigma(tau, args)
        if found is None:
            continue
        if found * math.sqrt(shifted) > 2 * _SIGMA_TARGET:  # tails too wide to prove tightly
            break
        sigma2 = exact_sigma2(Fraction(found * found))
        for _ in range(30):
            try:
                noise = noise_delta(sigma2, epsilon, shifted, step)
            except ValueError:  # σ² too small for κ's bound: more noise may close it
                noise = Fraction(1)
            tail = gaussian_tail_upper(sigma2, tau - step)
            bound = split_delta(sigma2, epsilon, keys, shifted, step, tail) if noise < 1 else noise
            if bound <= delta:
                return step, tau, sigma2, noise, keys * tail, bound
            if keys * tail > delta:  # the ℓ = G term alone exceeds δ, and grows with σ²
                break
            sigma2 = exact_sigma2(sigma2 * Fraction(1001, 1000))
    raise ValueError(
        "no discrete Gaussian threshold could be proved to meet δ at this ε (the proof's tail "
        "bounds do not close at these parameters, though a threshold may exist): raise ε or δ, "
        "or leave the rule to the plan, which then uses the optimal rule (Δ-scaling)"
    )
