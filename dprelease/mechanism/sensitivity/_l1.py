"""L1 sensitivity: how many rows, and how much of a sum, one privacy unit can move over a
level's noisy vector (the Laplace mechanism's Δ1), with its derivation in words.

It follows from exactly what the engine enforces (a unit keeps ≤ R rows) and the declared
bounds, in the integer units that are noised, never from data; the derivation is shown in the
column's own units, as people check it. `_l2` gives Δ2 for Gaussian noise.
"""

from __future__ import annotations

from fractions import Fraction

from dprelease.change import ProtectedChange, reach
from dprelease.spec import ReleaseSpec, RowValue


def l1_reach(spec: ReleaseSpec, neighbours: ProtectedChange, grouped: bool) -> tuple[int, str]:
    """Rows one unit can move in L1 over a level's rows, and why (`change.reach`): on a grouped
    level a substituted unit's added rows may sit in other groups (×2); on an ungrouped one (the
    whole release, or a grand total) they replace rows of the same cell."""
    return spec.unit_bounds.reach(neighbours, "(possibly in other groups)" if grouped else None)


def rows_reach(spec: ReleaseSpec, neighbours: ProtectedChange) -> int:
    """Rows one privacy unit can move in L1 over the cells (see `l1_reach`)."""
    return l1_reach(spec, neighbours, bool(spec.group_by))[0]


def count_sensitivity(
    spec: ReleaseSpec, neighbours: ProtectedChange, grouped: bool
) -> tuple[int, str]:
    moved, reason = l1_reach(spec, neighbours, grouped)
    return moved, f"count: {reason} → Δ = {moved}"


def _in_units_of_column(units: int, granularity: Fraction) -> str:
    """An amount of integer units in the column's own units, as people read it: 18432 units
    of 2^-10 is "18"; a bound the granularity does not divide shows where it was moved to."""
    return f"{float(units * granularity):.10g}"


def sum_sensitivity(
    spec: ReleaseSpec,
    neighbours: ProtectedChange,
    lower_u: int,
    upper_u: int,
    granularity: Fraction,
    grouped: bool,
    value: RowValue,
) -> tuple[int, str]:
    """Δ of a sum in integer units of `granularity`, and its derivation in the column's units
    (the units are the engine's; a reader checks the bounds and Δ in the column's). `value` is
    what each row adds: for a weighted count or sum, [lower_u, upper_u] is its weighted range."""

    def shown(units: int) -> str:
        return _in_units_of_column(units, granularity)

    steps = f"in steps of the granularity {float(granularity):.10g}"
    bounds = f"[{shown(lower_u)}, {shown(upper_u)}] ({steps})"
    weighted = value.weighted(bounds)
    if neighbours is ProtectedChange.SUBSTITUTE and not grouped:
        rows = reach(neighbours, spec.unit_bounds.rows, moves=False)
        span = max(upper_u, 0) - min(lower_u, 0)
        delta = rows * span
        return delta, (
            f"{value.what}: one unit's ≤ {rows} row(s) replaced, {weighted or 'each in ' + bounds}"
            f" → Δ = {rows} × {shown(span)} = {shown(delta)}"
        )
    moved, reason = l1_reach(spec, neighbours, grouped)
    largest = max(abs(lower_u), abs(upper_u))
    delta = moved * largest
    return delta, (
        f"{value.what}: {reason}; {weighted or 'each clamped to ' + bounds} → "
        f"Δ = {moved} × {shown(largest)} = {shown(delta)}"
    )
