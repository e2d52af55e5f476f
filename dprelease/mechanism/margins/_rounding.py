"""Controlled rounding: integer (or decimal-place) values that keep every margin the sum of its
cells, and the margin of error that survives the rounding."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp  # type: ignore[import-untyped]  # typed only with scipy-stubs
from scipy.optimize import Bounds, LinearConstraint, milp  # type: ignore[import-untyped]

from dprelease.mechanism.margins._consistency import Estimate
from dprelease.spec import Levels

# Values within this (relative) distance of an integer count as that integer when rounding.
_SNAP = 1e-9


@dataclass(frozen=True, eq=False)
class Rounded:
    """Integer values per level, every margin the sum of its integer cells; each value is
    within `max_shift[ℓ]` (strictly) of its unrounded estimate."""

    levels: Levels
    values: tuple[np.ndarray, ...]
    max_shift: tuple[float, ...]


def round_additive(estimate: Estimate) -> Rounded:
    """Round the cells to integers so that every margin row, summed from the rounded cells,
    is its own estimate rounded down or up (controlled rounding, Cox 1987).

    Each cell goes to ⌊x⌋ or ⌈x⌉ (an integral cell stays), each margin row to ⌊m⌋ or ⌈m⌉
    (a margin row within 1e-9 of an integer to that integer), minimising Σ|rounded − x| over
    the cells: a 0/1 program solved by HiGHS (`scipy.optimize.milp`).

    When it is exact. The constraints are the rows of the margins, each a partition of the
    cells. Nested margins (a hierarchy: total ⊃ region ⊃ cells) form a laminar family; margins
    that split into at most two such chains (e.g. [region], [age] and [] on region × age) form
    the union of two laminar families. Either way the constraint matrix is totally unimodular,
    and the unrounded fractions themselves satisfy the constraints, so an integer solution
    exists and every value moves by less than 1 (`max_shift` = 1 at every level). Three or more
    mutually crossed margins (3-D controlled rounding) may admit no such rounding: then margin
    rows may move further, at a cost that makes each extra unit the last resort, and
    `max_shift` reports the bound actually reached per level.
    """
    levels = estimate.levels
    x = estimate.values[0]
    nearest = np.rint(x)
    x = np.where(np.abs(x - nearest) <= _SNAP * np.maximum(1.0, np.abs(x)), nearest, x)
    floor = np.floor(x)
    frac = x - floor
    if len(levels.sizes) == 1:
        cells = (floor + (frac > 0.5)).astype(np.int64)
        return Rounded(levels, (cells,), (1.0,))
    a = sp.vstack([levels.matrix(k) for k in range(1, len(levels.sizes))]).tocsr()
    target = a @ frac  # each margin row's fractional excess over its cells' floors
    near = np.rint(target)
    snapped = np.abs(target - near) <= _SNAP * np.maximum(1.0, np.abs(a @ x))
    lo = np.where(snapped, near, np.floor(target))
    hi = np.where(snapped, near, np.ceil(target))
    c, k = levels.n_cells, a.shape[0]
    eye = sp.identity(k, format="csr")
    constraint = LinearConstraint(sp.hstack([a, -eye, eye]).tocsr(), lo, hi)
    # Slack (units beyond ⌊m⌋..⌈m⌉) costs more than any rounding of the cells can save.
    cost = np.concatenate([1.0 - 2.0 * frac, np.full(2 * k, float(c + 1))])
    upper = np.concatenate([np.where(frac > 0, 1.0, 0.0), np.full(2 * k, np.inf)])
    result = milp(
        cost,
        constraints=constraint,
        integrality=np.ones(c + 2 * k),
        bounds=Bounds(np.zeros(c + 2 * k), upper),
    )
    if not result.success:  # cannot happen: the all-slack point is feasible and bounded
        raise RuntimeError(f"integer rounding failed: {result.message}")
    solution = np.rint(result.x)
    cells = (floor + solution[:c]).astype(np.int64)
    slack = (solution[c : c + k] + solution[c + k :]).astype(np.int64)
    values = levels.aggregate(cells)
    bounds = [1.0]
    start = 0
    for size in levels.sizes[1:]:
        bounds.append(1.0 + float(slack[start : start + size].max()))
        start += size
    return Rounded(levels, tuple(v.astype(np.int64) for v in values), tuple(bounds))


def rounded_moe95(moe: np.ndarray, max_shift: float) -> np.ndarray:
    """Margin of error of integer-rounded counts: ⌈h + max_shift⌉ − 1.

    For a count the truth is an integer, so |rounded − truth| is an integer strictly below
    h + max_shift whenever |estimate − truth| ≤ h: the 95% guarantee of h carries over.
    """
    return np.ceil(np.asarray(moe) + max_shift) - 1.0
