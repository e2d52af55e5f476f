"""L2 sensitivity: how far one privacy unit can move a level's noisy vector in Euclidean norm.

The Gaussian mechanism's noise is set by Δ2, not Δ1. It follows from exactly what the engine
enforces (a unit keeps ≤ R rows, optionally ≤ R_g rows per cell) and the declared bounds, in the
integer units that are noised, never from data. Per level (the cells, a margin, the grand total),
a row sums a block of ≤ B cells, so a unit can put c = min(R, R_g·B) rows in one row of the level
(c = R without R_g). Its rows are then packed into a = ⌊R/c⌋ full rows and one of r = R − a·c,
which maximises the sum of squares: C² = a·c² + r² (the cap on groups per unit never enters, as
the spec keeps R ≤ G·R_g). With M = max(|L|, |U|), P = max(U, 0), N = max(−L, 0):

- add/remove: Δ2 = M·C (counts: C);
- a level of one row (an ungrouped release, the grand total): Δ2 = Δ1;
- substitution on a level of several rows: Δ2² = max(κC², (a − 1)κc² + 2(Mc + βr)² if r > 0),
  κ = max((P + N)², 2M²), β = min(P, N): √2·M·C for values of one sign (counts, nonnegative sums),
  where L1 doubles.

Δ2 is irrational in general, so Δ2² is carried as an exact integer and σ² = Δ2²/(2ρ) is exact.
PRIVACY.md gives the proofs; `tests/unit/test_sensitivity_property.py` checks them on
neighbouring datasets and a brute force in `tests/unit/test_l2.py` on every small case.
"""

from __future__ import annotations

from dataclasses import dataclass

from dprelease.change import ProtectedChange
from dprelease.spec import ResolvedSpec


@dataclass(frozen=True)
class Contribution:
    """What one unit may contribute to one level: ≤ `rows` rows, ≤ `per_row` in one of its
    rows, each value in [lower, upper] integer units (counts: [1, 1])."""

    rows: int
    per_row: int
    lower: int
    upper: int

    @property
    def packing(self) -> tuple[int, int, int]:
        """(a, c, r): a full rows of c, one row of r (a·c + r = rows)."""
        c = self.per_row
        return self.rows // c, c, self.rows % c

    @property
    def packed_squares(self) -> int:
        """C² = a·c² + r², the largest Σ x_b² over feasible row counts x."""
        a, c, r = self.packing
        return a * c * c + r * r


def contribution(
    rows: int, rows_per_group: int | None, cells_per_row: int, lower: int, upper: int
) -> Contribution:
    """The contribution bound of one level whose rows sum ≤ `cells_per_row` cells."""
    per_row = rows if rows_per_group is None else min(rows, rows_per_group * cells_per_row)
    return Contribution(rows, per_row, lower, upper)


def l2_squared(bound: Contribution, change: ProtectedChange, one_row: bool) -> int:
    """Δ2² in integer units² for a level of one row (`one_row`) or several."""
    largest = max(abs(bound.lower), abs(bound.upper))
    positive, negative = max(bound.upper, 0), max(-bound.lower, 0)
    if one_row:  # the whole release, or the grand total: Δ2 = Δ1 (one coordinate)
        if change is ProtectedChange.SUBSTITUTE:
            return (bound.rows * (positive + negative)) ** 2
        return (bound.rows * largest) ** 2
    if change is ProtectedChange.ADD_REMOVE:
        return largest * largest * bound.packed_squares
    a, c, r = bound.packing
    kappa = max((positive + negative) ** 2, 2 * largest * largest)
    exact = kappa * bound.packed_squares
    if r > 0:
        cross = (a - 1) * kappa * c * c + 2 * (largest * c + min(positive, negative) * r) ** 2
        exact = max(exact, cross)
    return exact


def l2_derivation(bound: Contribution, change: ProtectedChange, one_row: bool) -> str:
    """How Δ2 follows from the contribution bound, in words (for the manifest)."""
    a, c, r = bound.packing
    squared = l2_squared(bound, change, one_row)
    if one_row:
        return f"one row: Δ2 = Δ1 = √{squared}"
    packing = f"≤ {c} row(s) of a unit in one row of this level: {a} full row(s) of {c}"
    packing += f" and one of {r}" if r else ""
    how = (
        "substitution removes those rows and adds others, each row within the bounds"
        if change is ProtectedChange.SUBSTITUTE
        else "each row within the bounds"
    )
    return f"{packing}; {how} → Δ2² = {squared}"


def level_l2(
    resolved: ResolvedSpec,
    neighbours: ProtectedChange,
    level: int,
    grouped: bool,
    lower_u: int,
    upper_u: int,
) -> tuple[int, str]:
    """Δ2² of one level of a resolved spec (the cells, or a margin) in integer units², and why."""
    bounds = resolved.spec.unit_bounds
    bound = contribution(
        bounds.rows,
        bounds.rows_per_group if bounds.unit else None,
        resolved.level_cells_per_row[level],
        lower_u,
        upper_u,
    )
    one_row = not grouped
    return l2_squared(bound, neighbours, one_row), l2_derivation(bound, neighbours, one_row)
