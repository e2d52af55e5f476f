"""Exact amounts for people: what the Dagster metadata and the budget report show for ε, ρ and
caps (a double's 0.3333333333333333 is neither exact nor readable)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from dprelease.loss import amount_text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Fraction(1, 3), "1/3 ≈ 0.333"),
        (Fraction(11, 3), "11/3 ≈ 3.67"),  # 4 − 1/3: a double prints 3.6666666666666665
        (Fraction(1, 24), "1/24 ≈ 0.0417"),
        (Fraction(-1, 3), "-1/3 ≈ -0.333"),
        (Fraction(20000, 3), "20000/3 ≈ 6670"),  # no exponent where digits read better
        (Fraction(1, 3 * 10**8), "1/300000000 ≈ 3.33e-09"),
        (Fraction(4), "4"),
        (0, "0"),
        (100, "100"),  # not 1E+2
        (Fraction(3, 10), "0.3"),
        (Fraction(1, 4), "0.25"),
        (Fraction(1, 1024), "0.0009765625"),
        (Fraction(346573590279, 10**12), "0.346573590279"),  # a cap from an unrounded profile
        (Fraction(1, 2**60), f"1/{2**60} ≈ 8.67e-19"),  # terminating, but 42 digits long
    ],
)
def test_amounts_are_exact_and_readable(value: Fraction | int, text: str) -> None:
    assert amount_text(value) == text


def test_the_shown_fraction_is_the_value_itself() -> None:
    for value in (Fraction(7, 12), Fraction(2, 3) + Fraction(1, 4), Fraction(10**20 + 1, 7)):
        shown = amount_text(value)
        assert Fraction(shown.split(" ≈ ")[0]) == value
