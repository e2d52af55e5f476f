"""The optimal (ε, δ) rule for one key whose count of units moves by one: its keep probabilities.

Desfontaines, Voss, Gipson & Mandayam 2022 ("Differentially private partition selection",
PoPETs), Theorem 1: among all mechanisms that keep a key with a probability p(n) depending only
on the number n of units holding it, and are (ε, δ)-DP when one unit comes or goes (n ↔ n ± 1),
the one that keeps every key with the largest probability is

    p(0) = 0,   p(n) = min(1,  e^ε·p(n−1) + δ,  1 − e^{−ε}·(1 − p(n−1) − δ)).

The two terms are the two (ε, δ) constraints that bind ("keep" may be at most e^ε times likelier
with one unit more, plus δ; "drop" likewise the other way), so the rule is (ε, δ)-DP by
construction and p(1) = δ: a key held by one unit is kept with probability exactly δ. It is the
same as adding truncated two-sided geometric noise and thresholding when δ happens to fit the
truncation, hence its name; for other δ no threshold rule reaches it, so we keep each key with
probability p(n) itself, drawn exactly (`_draw`). Google's libraries (and PipelineDP) draw it by
comparing a floating-point uniform with a floating-point p(n); here p(n) is an interval of
Decimals that contains the true real (every step rounded outward), and the draw compares random
bits with it exactly, refining the interval in the (≤ 2⁻⁶² likely) case the bits fall inside.

Every step is monotone (nondecreasing in p(n−1), in e^ε and in δ where it matters), so running
the recursion on lower ends with the lower ends of e^ε, δ (and upper ends of e^{−ε} where they
enter with a minus sign) gives a lower bound, and vice versa.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache

from dprelease.mechanism.selection._real import (
    DIGITS,
    as_fraction,
    ceiling_context,
    exp_bounds,
    floor_context,
    rational_bounds,
)

#: The recursion stops once p(n) = 1 is proved; a key held by more units is always kept. This
#: cap only guards against a parameter for which that would take unreasonably long (ε tiny):
#: 10⁶ steps is ε ≈ 4e-5 at δ = 1e-12.
MAX_STEPS = 1_000_000


@dataclass(frozen=True)
class KeepTable:
    """p(n) for n = 0..len − 1 as intervals [lo[n], hi[n]] (Decimals); p(n) = 1 for n ≥ len − 1
    (the last entry is exactly 1)."""

    epsilon: Fraction
    delta: Fraction
    digits: int
    lo: tuple[Decimal, ...]
    hi: tuple[Decimal, ...]

    @property
    def certain(self) -> int:
        """The smallest n with p(n) = 1: a key held by this many units is always kept."""
        return len(self.lo) - 1

    def bounds(self, n: int) -> tuple[Fraction, Fraction]:
        """lo ≤ p(n) ≤ hi as exact rationals."""
        n = min(n, self.certain)
        return as_fraction(self.lo[n]), as_fraction(self.hi[n])

    def median_count(self) -> int:
        """τ of this rule: the smallest n with p(n) ≥ 1/2 (proved from the lower ends)."""
        half = Decimal("0.5")
        return next(n for n, lo in enumerate(self.lo) if lo >= half)


@lru_cache(maxsize=64)
def keep_table(epsilon: Fraction, delta: Fraction, digits: int = DIGITS) -> KeepTable:
    """The optimal rule's p(n) at (ε, δ), each as an interval at `digits` significant digits."""
    if not (0 < delta < Fraction(1, 2)) or epsilon <= 0:
        raise ValueError("the optimal rule needs ε > 0 and 0 < δ < 1/2")
    down, up = floor_context(digits), ceiling_context(digits)
    a_lo, a_hi = exp_bounds(epsilon, digits)  # e^ε
    b_lo, b_hi = exp_bounds(-epsilon, digits)  # e^{−ε}
    d_lo, d_hi = rational_bounds(delta, digits)
    one = Decimal(1)
    lo: list[Decimal] = [Decimal(0)]
    hi: list[Decimal] = [Decimal(0)]
    while lo[-1] < one:
        if len(lo) > MAX_STEPS:
            raise ValueError("ε is too small for the optimal rule to reach certainty")
        p_lo, p_hi = lo[-1], hi[-1]
        grow_lo = down.fma(a_lo, p_lo, d_lo)  # e^ε·p + δ
        grow_hi = up.fma(a_hi, p_hi, d_hi)
        # 1 − e^{−ε}·s with s = 1 − p − δ: smallest with the largest s and (s ≥ 0) largest e^{−ε}
        s_hi = up.subtract(up.subtract(one, p_lo), d_lo)
        s_lo = down.subtract(down.subtract(one, p_hi), d_hi)
        fall_lo = one if s_hi <= 0 else down.subtract(one, up.multiply(b_hi, s_hi))
        fall_hi = one if s_lo <= 0 else up.subtract(one, down.multiply(b_lo, s_lo))
        lo.append(min(one, grow_lo, fall_lo))
        hi.append(min(one, grow_hi, fall_hi))
    return KeepTable(epsilon, delta, digits, tuple(lo), tuple(hi))


def per_key_delta(delta: Fraction, keys: int, digits: int = DIGITS) -> Fraction:
    """The largest δ_k (to `digits` digits) with 1 − (1 − δ_k)^m ≤ δ, m = `keys`: the per-key δ of
    m independent per-key rules that together spend δ.

    Composing m mechanisms that are each (ε/m, δ_k)-DP gives (ε, 1 − (1 − δ_k)^m)-DP (Kairouz, Oh
    & Viswanath 2015, Theorem 3.3 with i = 0), slightly more per key than δ/m (as Google's library
    and PipelineDP split it). δ_k is a decimal just below 1 − (1 − δ)^{1/m}; the inequality is
    proved with (1 − δ_k)^m bounded from below by repeated squaring with every product rounded
    down, and δ_k is stepped down until the proof goes through."""
    if keys == 1:
        return delta
    down = floor_context(digits)
    d_lo, d_hi = rational_bounds(delta, digits)
    one_minus = down.subtract(1, d_hi)
    candidate = down.subtract(1, ceiling_context(digits).power(one_minus, Decimal(1) / keys))
    step = floor_context(digits).multiply(d_lo, Decimal(10) ** (10 - digits))
    while not _composes(candidate, keys, d_lo, digits):
        candidate = down.subtract(candidate, step)
    return max(as_fraction(candidate), delta / keys)


def _composes(key_delta: Decimal, keys: int, delta_lo: Decimal, digits: int) -> bool:
    """Whether 1 − (1 − δ_k)^m ≤ δ is proved: a lower bound of (1 − δ_k)^m (products rounded
    down, all factors in [0, 1]) at least 1 − δ_lo."""
    down, up = floor_context(digits), ceiling_context(digits)
    base, power, result = down.subtract(1, key_delta), keys, Decimal(1)
    while power:
        if power & 1:
            result = down.multiply(result, base)
        base = down.multiply(base, base)
        power >>= 1
    return up.subtract(1, result) <= delta_lo


def keep_probabilities(table: KeepTable, counts: list[int]) -> list[float]:
    """p(n) as floats (the midpoint of each interval), for the planner's tables."""
    out = []
    for n in counts:
        lo, hi = table.bounds(n)
        out.append(float((lo + hi) / 2))
    return out
