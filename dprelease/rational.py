"""Budgets as exact rationals, so sums of shares never drift above a cap.

A float is read as the decimal it prints as (0.3 → 3/10): that is what a steward wrote in YAML
or on the command line, and it lets a cap split into exact shares such as 1/40.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

Epsilon = float | int | Fraction | Decimal | str


def exact_positive(value: Epsilon) -> Fraction:
    """`value` as an exact rational > 0; ValueError (saying why) for ≤ 0, NaN, inf, non-numbers."""
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
    return exact
