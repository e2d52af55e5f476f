"""Rigorous bounds on the real numbers key selection needs: e^x of a rational, √, π.

Why: a selection's δ is a tail probability of a discrete law, a real number like
e^{−j/b}/(1 + e^{−1/b}). The ledger charges δ and the odds statement rests on it, so whether a
threshold meets a δ budget must be *proved*, not estimated in floating point (where the last bit
could round a δ just above the budget to one just below it). Every function here returns an
interval [lo, hi] of `Decimal`s that contains the true value: sums and products are rounded
outward (`ROUND_FLOOR` for a lower end, `ROUND_CEILING` for an upper end), and `Decimal.exp`,
which the decimal module documents as correctly rounded (within half a unit in the last place),
is widened by one unit in the last place each way. Comparisons with the budget are then exact
comparisons of rationals.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_EVEN, Context, Decimal
from fractions import Fraction

#: Significant digits of the default working precision (about 166 bits): far finer than any
#: δ a scope can hold (≥ 2.2e-308 as a statable amount has at most ~17 significant digits of
#: its own, and every comparison here has a margin of many orders of magnitude or is refined).
DIGITS = 50
_EXPONENT_RANGE = 10**8

# π to 60 digits, truncated (so PI_LOW < π < PI_LOW + 10^-60).
_PI_DIGITS = "3.14159265358979323846264338327950288419716939937510582097494"


def floor_context(digits: int = DIGITS) -> Context:
    return Context(prec=digits, rounding=ROUND_FLOOR, Emin=-_EXPONENT_RANGE, Emax=_EXPONENT_RANGE)


def ceiling_context(digits: int = DIGITS) -> Context:
    return Context(prec=digits, rounding=ROUND_CEILING, Emin=-_EXPONENT_RANGE, Emax=_EXPONENT_RANGE)


def _nearest_context(digits: int) -> Context:
    return Context(
        prec=digits, rounding=ROUND_HALF_EVEN, Emin=-_EXPONENT_RANGE, Emax=_EXPONENT_RANGE
    )


def rational_bounds(x: Fraction, digits: int = DIGITS) -> tuple[Decimal, Decimal]:
    """Decimals lo ≤ x ≤ hi at `digits` significant digits (equal when x is one)."""
    num, den = Decimal(x.numerator), Decimal(x.denominator)
    return floor_context(digits).divide(num, den), ceiling_context(digits).divide(num, den)


def exp_bounds(x: Fraction, digits: int = DIGITS) -> tuple[Decimal, Decimal]:
    """lo ≤ e^x ≤ hi for a rational x, both > 0.

    e^x is increasing, so e^{x_lo} ≤ e^x ≤ e^{x_hi} for the outward-rounded ends of x; each is
    computed by `Decimal.exp` (correctly rounded: within half an ulp of the true value) with two
    guard digits, then moved one ulp outward, so each end is strictly on its side.
    """
    x_lo, x_hi = rational_bounds(x, digits + 2)
    near = _nearest_context(digits + 2)
    lo = near.exp(x_lo).next_minus(near)
    hi = near.exp(x_hi).next_plus(near)
    return floor_context(digits).plus(lo), ceiling_context(digits).plus(hi)


def sqrt_bounds(x: Decimal, digits: int = DIGITS) -> tuple[Decimal, Decimal]:
    """lo ≤ √x ≤ hi for x ≥ 0 (Decimal.sqrt is correctly rounded; widened by one ulp)."""
    near = _nearest_context(digits + 2)
    root = near.sqrt(x)
    lo = max(Decimal(0), root.next_minus(near))
    return floor_context(digits).plus(lo), ceiling_context(digits).plus(root.next_plus(near))


def pi_bounds(digits: int = DIGITS) -> tuple[Decimal, Decimal]:
    """lo ≤ π ≤ hi (from a truncated 60-digit expansion; `digits` ≤ 58)."""
    if digits > 58:
        raise ValueError("π is held to 60 digits here")
    pi = Decimal(_PI_DIGITS)
    return floor_context(digits).plus(pi), ceiling_context(digits).plus(pi + Decimal("1e-60"))


def as_fraction(x: Decimal) -> Fraction:
    """A Decimal's exact value."""
    return Fraction(x)
