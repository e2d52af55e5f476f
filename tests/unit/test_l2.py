"""L2 sensitivity against a brute force over every small case.

A unit's contribution to a level is a vector x of rows per level row (Σ x ≤ R, each ≤ c), and
per row any sum in [x_b·L, x_b·U]. Adding or removing the unit moves the level by its sums s;
substituting it moves it by s − t for another feasible unit, whose per-row extreme difference is
max(x_b·U − y_b·L, y_b·U − x_b·L). Enumerating every x (and pair x, y) on enough rows gives the
exact Δ2², which `l2_squared` must equal.
"""

from __future__ import annotations

import itertools
import math

import pytest

from dprelease.change import ProtectedChange
from dprelease.mechanism.sensitivity import contribution, l2_squared

BOUNDS = [(1, 1), (0, 3), (2, 5), (-2, 2), (-1, 2), (-3, 1), (-4, -1)]


def vectors(rows: int, per_row: int, length: int) -> list[tuple[int, ...]]:
    """Every row-count vector of `length` rows with Σ ≤ rows and each ≤ per_row."""
    return [x for x in itertools.product(range(per_row + 1), repeat=length) if sum(x) <= rows]


def brute_force(rows: int, per_row: int, lower: int, upper: int, length: int, substitute: bool):
    found = vectors(rows, per_row, length)
    if not substitute:
        largest = max(abs(lower), abs(upper))
        return max(sum((largest * xb) ** 2 for xb in x) for x in found)
    best = 0
    for x, y in itertools.product(found, repeat=2):
        moved = sum(
            max(xb * upper - yb * lower, yb * upper - xb * lower, 0) ** 2
            for xb, yb in zip(x, y, strict=True)
        )
        best = max(best, moved)
    return best


@pytest.mark.parametrize("change", [ProtectedChange.ADD_REMOVE, ProtectedChange.SUBSTITUTE])
@pytest.mark.parametrize("lower, upper", BOUNDS)
def test_l2_equals_the_brute_force_on_levels_of_several_rows(
    change: ProtectedChange, lower: int, upper: int
) -> None:
    for rows, per_group, cells in itertools.product(range(1, 6), [None, 1, 2, 3], [1, 2]):
        bound = contribution(rows, per_group, cells, lower, upper)
        a, _, r = bound.packing
        length = 2 * (a + (r > 0))  # enough rows for the extreme placements
        if length > 6:
            continue
        expected = brute_force(
            rows, bound.per_row, lower, upper, length, change is ProtectedChange.SUBSTITUTE
        )
        assert l2_squared(bound, change, one_row=False) == expected, (rows, per_group, cells)


@pytest.mark.parametrize("change", [ProtectedChange.ADD_REMOVE, ProtectedChange.SUBSTITUTE])
@pytest.mark.parametrize("lower, upper", BOUNDS)
def test_one_row_levels_have_delta2_equal_to_delta1(
    change: ProtectedChange, lower: int, upper: int
) -> None:
    for rows in range(1, 6):
        bound = contribution(rows, None, 1, lower, upper)
        expected = brute_force(rows, rows, lower, upper, 1, change is ProtectedChange.SUBSTITUTE)
        assert l2_squared(bound, change, one_row=True) == expected


def test_the_cross_term_of_mixed_signs_matters() -> None:
    """[−1, 2], R = 5, R_g = 2: Δ2 = √86, not √81 (the κC² term alone would be unsound)."""
    bound = contribution(5, 2, 1, -1, 2)
    assert l2_squared(bound, ProtectedChange.SUBSTITUTE, one_row=False) == 86


def test_coarser_levels_have_larger_delta2() -> None:
    """R = 12, R_g = 1, counts, add/remove: cells √12, rows of 5 cells √54, the total 12."""
    assert (
        math.isqrt(l2_squared(contribution(12, 1, 1, 1, 1), ProtectedChange.ADD_REMOVE, False)) == 3
    )
    assert l2_squared(contribution(12, 1, 1, 1, 1), ProtectedChange.ADD_REMOVE, False) == 12
    assert l2_squared(contribution(12, 1, 5, 1, 1), ProtectedChange.ADD_REMOVE, False) == 54
    assert l2_squared(contribution(12, 1, 12, 1, 1), ProtectedChange.ADD_REMOVE, True) == 144
