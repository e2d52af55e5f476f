"""Budgets as exact rationals, so sums of shares never drift above a cap.

A float is read as the decimal it prints as (0.3 → 3/10): that is what a steward wrote in YAML
or on the command line, and it lets a cap split into exact shares such as 1/40.

Every ε accepted is also one that can be stated: manifests, metadata and messages show ε as a
double, so a value beyond the range of a normal double (1e-400, 1e400) is refused where it is
read, with one line, instead of failing later while an error message formats it.
"""

from __future__ import annotations

import math
import sys
from decimal import Decimal, localcontext
from fractions import Fraction

Epsilon = float | int | Fraction | Decimal | str

#: The range of ε that a double states to full precision (the normal doubles): below it a float
#: rounds to a subnormal or to 0, above it to infinity.
SMALLEST_STATABLE = Fraction(sys.float_info.min)
LARGEST_STATABLE = Fraction(sys.float_info.max)


def exact_positive(value: Epsilon) -> Fraction:
    """`value` as an exact rational > 0 that a double can state; ValueError (saying why) for
    ≤ 0, NaN, inf, non-numbers, and values outside [SMALLEST_STATABLE, LARGEST_STATABLE]."""
    if isinstance(value, bool):
        raise ValueError(f"must be a number > 0, got {value!r}")
    try:
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ValueError
            exact = Fraction(repr(value))
        else:
            exact = Fraction(value)
    except (ValueError, TypeError, ZeroDivisionError, OverflowError):
        raise ValueError(f"must be a finite number > 0, got {value!r}") from None
    if exact <= 0:
        raise ValueError(f"must be > 0, got {value!r}")
    if exact < SMALLEST_STATABLE:
        raise ValueError(
            f"must be at least {float(SMALLEST_STATABLE):.6g} (too small to state as a number), "
            f"got {value!r}"
        )
    if exact > LARGEST_STATABLE:
        raise ValueError(
            f"must be at most {float(LARGEST_STATABLE):.6g} (too large to state as a number), "
            f"got {value!r}"
        )
    return exact


def decimal_text(value: Fraction | int, digits: int = 6) -> str:
    """`value` to `digits` significant digits, as `f"{float(value):.{digits}g}"` prints it, but
    for every rational: one beyond the range of a double (a sum of large charges, a noise scale
    Δ/ε) is rounded in decimal arithmetic instead of overflowing or printing as 0."""
    try:
        as_float = float(value)
    except OverflowError:
        as_float = math.inf
    if math.isfinite(as_float) and (value == 0 or abs(as_float) >= sys.float_info.min):
        return f"{as_float:.{digits}g}"
    exact = Fraction(value)
    with localcontext(prec=digits):
        rounded = Decimal(exact.numerator) / Decimal(exact.denominator)
    mantissa, _, exponent = f"{rounded:.{digits - 1}e}".partition("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent):+03d}"


def typed_text(value: Fraction) -> str:
    """`value` as a user types it, exactly: the decimal when it is exact (0.25), else the
    fraction (1/3); for a message that tells what to type (`--epsilon 1/3`)."""
    decimal = decimal_text(value)
    return decimal if Fraction(decimal) == value else str(value)
