"""Budget scopes: created once with a cap and a composition; the cap changes only on purpose.

The ledger's cap is the one source of truth. Opening a scope that exists never changes or
questions its cap (a re-run after `set-cap` must work); changing it is `set_cap`, recorded in the
history with the old and new values and the reason.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, get_args

from sqlalchemy import Connection, Row, insert, select, update

from dprelease.errors import CompositionMismatch, LedgerError
from dprelease.ledger.database import Database, now
from dprelease.ledger.events import record_event
from dprelease.ledger.records import Composition
from dprelease.ledger.schema import scopes
from dprelease.ledger.spending import fmt
from dprelease.loss import Amount, exact_positive


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


def ensure_scope(
    db: Database, conn: Connection, name: str, cap: Amount, composition: Composition
) -> bool:
    """Create the scope with `cap` if it does not exist; True if it was created.

    An existing scope keeps its cap whatever `cap` says; its composition must match.
    """
    if not name or not name.strip():
        raise LedgerError("scope name must be non-empty")
    if composition not in get_args(Composition):
        raise LedgerError(
            f"scope {name!r}: composition must be 'sequential' or 'parallel', got {composition!r}"
        )
    exact_cap = exact_epsilon(cap, f"cap of scope {name!r}")
    db.serialise_creators(conn)  # no row to lock yet
    row = conn.execute(select(scopes).where(scopes.c.name == name).with_for_update()).one_or_none()
    if row is not None:
        require_composition(row, composition)
        return False
    conn.execute(
        insert(scopes).values(
            name=name, cap=str(exact_cap), composition=composition, created_at=now()
        )
    )
    record_event(
        conn,
        "scope_created",
        name,
        epsilon=exact_cap,
        detail=f"cap {exact_cap} ({fmt(exact_cap)}), {composition}",
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
