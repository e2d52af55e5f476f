"""Key selection's δ budget (schema 5): a scope's lifetime δ for selections, and each charge's.

A release whose keys are selected from the data (`select: true`) spends a δ as well as its ε
(or ρ): the probability that a key only one unit holds is released (docs/selection.md). That δ
is a budget of its own, never the δ a zCDP scope's ρ is read at (the odds statement then fails
with probability at most that δ plus every selection δ spent: PRIVACY.md). A scope keeps its
selection δ budget for life: stated when the scope opens (or by its first selecting release,
if it had none), never changed. Each charge records the δ it spends; a charge that would take
the scope's δ past its budget is refused before anything is charged, like ε (LedgerError: a
release spends the share of the budget its loss is of the cap, so the δ runs out with the cap).
Parallel scopes spend δ per period, as they spend ε.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from sqlalchemy import Connection, Row, select, update

from dprelease.errors import LedgerError
from dprelease.ledger.schema import charges, scopes
from dprelease.loss import amount_text

#: Charges whose δ counts as spent (as their ε does): reserved or committed, never voided.
_SPENDING = ("reserved", "committed")


def delta_spent(conn: Connection, scope: str, period: str | None, parallel: bool) -> Fraction:
    """The selection δ the scope has spent (in `period` for a parallel scope)."""
    query = select(charges.c.selection_delta).where(
        charges.c.scope == scope,
        charges.c.status.in_(_SPENDING),
        charges.c.selection_delta.is_not(None),
    )
    if parallel:
        query = query.where(charges.c.period == period)
    return sum((Fraction(d) for d in conn.execute(query).scalars()), Fraction(0))


def delta_spent_by_scope(conn: Connection, parallel: dict[str, bool]) -> dict[str, Fraction]:
    """The selection δ each scope has spent (a parallel scope: its worst period's), for
    `ledger status` and the planner; every scope of `parallel` gets an entry."""
    query = select(charges.c.scope, charges.c.period, charges.c.selection_delta).where(
        charges.c.scope.in_(list(parallel)),
        charges.c.status.in_(_SPENDING),
        charges.c.selection_delta.is_not(None),
    )
    per_period: dict[tuple[str, str | None], Fraction] = {}
    for scope, period, delta in conn.execute(query):
        key = (scope, period if parallel[scope] else None)
        per_period[key] = per_period.get(key, Fraction(0)) + Fraction(delta)
    spent = dict.fromkeys(parallel, Fraction(0))
    for (scope, _), amount in per_period.items():
        spent[scope] = max(spent[scope], amount)
    return spent


def check_delta(
    conn: Connection,
    scope_row: Row[Any] | None,
    scope: str,
    period: str | None,
    parallel: bool,
    delta: Fraction,
    stated_budget: Fraction | None,
) -> Fraction:
    """The scope's selection δ budget once this charge of `delta` fits it; LedgerError when the
    scope has none and none is stated, or a stated one differs from the scope's kept one;
    BudgetExhausted when `delta` does not fit what is left. Nothing is written."""
    kept = (
        None
        if scope_row is None or scope_row.selection_delta is None
        else Fraction(scope_row.selection_delta)
    )
    if kept is not None and stated_budget is not None and stated_budget != kept:
        raise LedgerError(
            f"scope {scope!r} keeps a selection δ budget of {amount_text(kept)}; this release "
            f"states {amount_text(stated_budget)}: a scope's δ budget is fixed for life"
        )
    budget = kept if kept is not None else stated_budget
    if budget is None:
        raise LedgerError(
            f"select: true spends δ, and scope {scope!r} has no δ budget for it: give "
            "selection_delta (e.g. 1e-9) when its first selecting release is made"
        )
    spent = Fraction(0) if scope_row is None else delta_spent(conn, scope, period, parallel)
    if spent + delta > budget:  # not reached while each spends its loss's share of the cap
        raise LedgerError(
            f"key selection would spend δ = {amount_text(delta)}, and scope {scope!r} has "
            f"{amount_text(max(budget - spent, Fraction(0)))} of its selection δ = "
            f"{amount_text(budget)} left; nothing was charged"
        )
    return budget


def record_delta(
    conn: Connection, scope: str, charge_id: int, delta: Fraction, budget: Fraction
) -> None:
    """Record the δ a new charge spends, and fix the scope's budget if it had none."""
    conn.execute(
        update(charges).where(charges.c.charge_id == charge_id).values(selection_delta=str(delta))
    )
    conn.execute(
        update(scopes)
        .where(scopes.c.name == scope, scopes.c.selection_delta.is_(None))
        .values(selection_delta=str(budget))
    )


def scope_delta_budget(conn: Connection, scope: str) -> Fraction | None:
    """The scope's selection δ budget (None: it has none yet)."""
    kept = conn.execute(
        select(scopes.c.selection_delta).where(scopes.c.name == scope)
    ).scalar_one_or_none()
    return None if kept is None else Fraction(kept)
