"""Budget scopes: created once with a cap and a composition; the cap changes only on purpose.

The ledger's cap is the one source of truth. Opening a scope that exists never changes or
questions its cap (a re-run after `set-cap` must work); changing it is `set_cap`, recorded in the
history with the old and new values and the reason.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, get_args

from sqlalchemy import Connection, Row, insert, select, update

from dprelease.errors import CompositionMismatch, LedgerError, MeasureMismatch
from dprelease.ledger.database import Database, now
from dprelease.ledger.events import record_event
from dprelease.ledger.identity import scope_name_problem
from dprelease.ledger.records import Composition
from dprelease.ledger.schema import scopes
from dprelease.ledger.spending import fmt
from dprelease.loss import Amount, Measure, exact_positive


def exact_epsilon(value: Amount, what: str = "epsilon") -> Fraction:
    """`value` as an exact positive rational (see `dprelease.rational`); LedgerError if not."""
    try:
        return exact_positive(value)
    except ValueError as exc:
        raise LedgerError(f"{what} {exc}") from None


def require_composition(row: Row[Any], composition: str) -> None:
    """A release composes periods as its spec says; it may only draw on a scope that agrees.

    Parallel composition gives every period the full cap, which is sound only when the spec
    declares that periods hold disjoint people; a sequential spec on a parallel scope would
    spend the cap again in each period.
    """
    if row.composition != composition:
        raise CompositionMismatch(
            f"budget scope {row.name!r} composes periods {row.composition!r} but the spec "
            f"says {composition!r}; a scope's composition never changes: release into a "
            f"{composition!r} scope (another scope name), or fix the spec's period.composition"
        )


def require_measure(row: Row[Any], measure: Measure, delta: float | None = None) -> None:
    """A scope keeps one measure (and, for zCDP, one δ) for life: its amounts are in one unit."""
    found = Measure(row.measure or Measure.PURE)
    if found is not measure:
        raise MeasureMismatch(
            f"budget scope {row.name!r} spends {found.symbol} ({found.value}) but this release "
            f"asks for {measure.symbol} ({measure.value}); a scope's measure never changes: "
            "release into another scope, or make the privacy profile's measure agree"
        )
    if measure is Measure.ZCDP and None not in (row.delta, delta) and float(row.delta) != delta:
        raise MeasureMismatch(
            f"budget scope {row.name!r} reads its odds statement at δ = {row.delta}, not "
            f"{delta}; a scope's δ never changes: make the privacy profile's delta agree"
        )


def ensure_scope(
    db: Database,
    conn: Connection,
    name: str,
    cap: Amount,
    composition: Composition,
    measure: Measure = Measure.PURE,
    delta: float | None = None,
) -> bool:
    """Create the scope with `cap` (in `measure`'s unit) if it does not exist; True if it was
    created.

    An existing scope keeps its cap whatever `cap` says; its composition, measure and δ must
    match. A new scope's name must be canonical (`_SCOPE_NAME`) and differ from every existing
    scope's other than in letter case.
    """
    if (problem := scope_name_problem(name)) is not None:
        raise LedgerError(problem)
    if (measure is Measure.ZCDP) != (delta is not None):
        raise LedgerError(f"scope {name!r}: a zcdp scope needs its δ, a pure one has none")
    if composition not in get_args(Composition):
        raise LedgerError(
            f"scope {name!r}: composition must be 'sequential' or 'parallel', got {composition!r}"
        )
    exact_cap = exact_epsilon(cap, f"cap of scope {name!r}")
    db.serialise_creators(conn)  # no row to lock yet
    row = conn.execute(select(scopes).where(scopes.c.name == name).with_for_update()).one_or_none()
    if row is not None:
        require_composition(row, composition)
        require_measure(row, measure, delta)
        return False
    names = conn.execute(select(scopes.c.name)).scalars().all()
    alike = next((other for other in names if other.casefold() == name.casefold()), None)
    if alike is not None:
        raise LedgerError(
            f"scope {name!r} differs from the existing scope {alike!r} only in letter case; "
            f"release into {alike!r}, or choose a name that is not the same budget's"
        )
    conn.execute(
        insert(scopes).values(
            name=name,
            cap=str(exact_cap),
            composition=composition,
            created_at=now(),
            measure=measure.value,
            delta=None if delta is None else repr(delta),
        )
    )
    unit = "" if measure is Measure.PURE else f", zcdp: ρ, δ = {delta!r}"
    record_event(
        conn,
        "scope_created",
        name,
        epsilon=exact_cap,
        detail=f"cap {exact_cap} ({fmt(exact_cap)}), {composition}{unit}",
    )
    return True


def set_cap(db: Database, conn: Connection, name: str, cap: Amount, reason: str | None) -> None:
    """Change a scope's cap on purpose; the old and new caps and the reason go into the history."""
    exact_cap = exact_epsilon(cap, f"cap of scope {name!r}")
    row = db.locked_scope(conn, name)
    old = Fraction(row.cap)
    if old == exact_cap:
        return
    conn.execute(update(scopes).where(scopes.c.name == name).values(cap=str(exact_cap)))
    detail = f"cap {old} ({fmt(old)}) -> {exact_cap} ({fmt(exact_cap)})"
    record_event(
        conn,
        "cap_changed",
        name,
        epsilon=exact_cap,
        detail=f"{detail}; reason: {reason}" if reason else detail,
    )
