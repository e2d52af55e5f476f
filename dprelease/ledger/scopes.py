"""Budget scopes: made once with a cap and the terms of their guarantee; the cap changes only on
purpose, the terms never.

The ledger's cap is the one source of truth. Opening a scope that exists never changes or
questions its cap (a re-run after `set_cap` must work); changing it is `set_cap`, recorded in the
history with the old and new values and the reason. Its terms (`ScopeTerms`: composition,
measure and δ, neighbours, privacy unit, and the partition into periods of a parallel scope) are
what its cap means: a release that states other terms is refused, whichever way it comes.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, get_args

from sqlalchemy import Connection, Row, insert, select, update

from dprelease.change import PrivacyUnit, ProtectedChange
from dprelease.errors import (
    CompositionMismatch,
    LedgerError,
    MeasureMismatch,
    NeighboursMismatch,
    PrivacyUnitMismatch,
)
from dprelease.ledger.database import Database, now
from dprelease.ledger.events import record_event
from dprelease.ledger.identity import scope_name_problem
from dprelease.ledger.records import Composition, ScopeTerms
from dprelease.ledger.schema import scopes
from dprelease.loss import Amount, Measure, amount_text, exact_positive


def exact_epsilon(value: Amount, what: str = "epsilon") -> Fraction:
    """`value` as an exact positive rational (see `dprelease.rational`); LedgerError if not."""
    try:
        return exact_positive(value)
    except ValueError as exc:
        raise LedgerError(f"{what} {exc}") from None


def terms_of(row: Row[Any]) -> ScopeTerms:
    """The terms a scope row keeps (None where it keeps none yet)."""
    return ScopeTerms(
        composition=row.composition,
        measure=Measure(row.measure or Measure.PURE),
        delta=None if row.delta is None else float(row.delta),
        neighbours=None if row.neighbours is None else ProtectedChange(row.neighbours),
        unit=None if row.privacy_unit is None else PrivacyUnit.from_key(row.privacy_unit),
        period_column=row.period_column,
    )


def _unit_fix(unit: PrivacyUnit) -> str:
    return (
        "leave privacy_unit out of the spec"
        if unit.column is None
        else (f"set the spec's privacy_unit: {unit.column}")
    )


def terms_conflict(
    name: str,
    kept: ScopeTerms,
    asked: ScopeTerms,
    *,
    default_neighbours: str | None = None,
) -> LedgerError | None:
    """The first term `asked` (a release) states differently from what scope `name` keeps, as the
    error that refuses it, in one line: what differs, then what to change; None when they agree.
    A term either side leaves None is not compared. `default_neighbours`, when the release's
    neighbours are the default because nothing stated them, is the option that gives a privacy
    profile (`--config`): the message says to give the scope's own."""
    scope = f"budget scope {name!r}"
    charged = "nothing was charged"
    if kept.composition != asked.composition:
        return CompositionMismatch(
            f"{scope} composes periods {kept.composition!r} but the spec says "
            f"{asked.composition!r}; {charged}. A scope's composition never changes: release "
            f"into a {asked.composition!r} scope (another scope name), or fix the spec's "
            "period.composition"
        )
    parallel = kept.composition == "parallel"
    if (
        parallel
        and None not in (kept.period_column, asked.period_column)
        and (kept.period_column != asked.period_column)
    ):
        return CompositionMismatch(
            f"{scope} composes months in parallel, cut by column {kept.period_column!r}, but "
            f"this spec cuts its periods by {asked.period_column!r}; {charged}. Parallel "
            "composition holds for one partition of the people only: set the spec's "
            f"period.column: {kept.period_column}, or release into another scope"
        )
    if kept.measure is not asked.measure:
        return MeasureMismatch(
            f"{scope} spends {kept.measure.symbol} ({kept.measure.value}) but this release "
            f"asks for {asked.measure.symbol} ({asked.measure.value}); {charged}. A scope's "
            "measure never changes: release into another scope, or make the privacy profile's "
            "measure agree"
        )
    if (
        asked.measure is Measure.ZCDP
        and None not in (kept.delta, asked.delta)
        and (kept.delta != asked.delta)
    ):
        return MeasureMismatch(
            f"{scope} reads its odds statement at δ = {kept.delta}, not {asked.delta}; "
            f"{charged}. A scope's δ never changes: make the privacy profile's delta agree"
        )
    if (
        kept.neighbours is not None
        and asked.neighbours is not None
        and kept.neighbours != asked.neighbours
    ):
        word = kept.neighbours.value
        if ProtectedChange.ANSWER in (kept.neighbours, asked.neighbours):
            wave = kept.neighbours is ProtectedChange.ANSWER
            return NeighboursMismatch(
                f"{scope} "
                + (
                    "holds local-DP waves (answer neighbours: who answered is public)"
                    if wave
                    else f"protects {word} neighbours (who is in the data is protected)"
                )
                + f" and this {'release' if wave else 'wave'} cannot share it; {charged}. A "
                "wave publishes who answered: record waves in a scope of their own, and central "
                "releases in another"
            )
        if default_neighbours is not None:
            why = " (the default: neither the spec nor a privacy profile says otherwise)"
            fix = f"give {default_neighbours} with the scope's privacy profile, or set the spec's"
        else:
            why, fix = "", "set the spec's (or its privacy profile's)"
        return NeighboursMismatch(
            f"{scope} protects {word} neighbours (its cap is read under them) but this release "
            f"is calibrated for {asked.neighbours.value}{why}; {charged}. A scope's neighbours "
            f"never change: {fix} neighbours: {word}, or release into another scope"
        )
    if kept.unit is not None and asked.unit is not None and kept.unit != asked.unit:
        return PrivacyUnitMismatch(
            f"{scope} protects a privacy unit of {kept.unit} but this release's unit is "
            f"{asked.unit}; {charged}. A scope's privacy unit never changes (what it has spent "
            f"bounds what is revealed about one such unit): {_unit_fix(kept.unit)}, or release "
            "into another scope"
        )
    return None


#: The terms a scope may keep none of (an earlier ledger's, or `ensure_scope` without them),
#: with their column: a charge that states one fixes it.
_OPEN_TERMS = ("neighbours", "unit", "period_column")


def _stored(term: str, value: Any) -> str:
    if term == "neighbours":
        return str(value.value)
    return value.key if term == "unit" else str(value)


def keep_terms(conn: Connection, row: Row[Any], asked: ScopeTerms) -> ScopeTerms:
    """Refuse `asked` (the error of `terms_conflict`) unless the scope keeps the same terms; fix
    every term it keeps none of yet that `asked` states (recorded). Returns the kept terms."""
    kept = terms_of(row)
    if (conflict := terms_conflict(row.name, kept, asked)) is not None:
        raise conflict
    fixed = {
        term: getattr(asked, term)
        for term in _OPEN_TERMS
        if getattr(kept, term) is None
        and getattr(asked, term) is not None
        and (term != "period_column" or kept.composition == "parallel")
    }
    if not fixed:
        return kept
    columns = {"unit": "privacy_unit"}
    conn.execute(
        update(scopes)
        .where(scopes.c.name == row.name)
        .values({columns.get(term, term): _stored(term, value) for term, value in fixed.items()})
    )
    record_event(conn, "terms_fixed", row.name, detail=f"kept for life: {describe(fixed)}")
    return terms_of(conn.execute(select(scopes).where(scopes.c.name == row.name)).one())


def describe(terms: dict[str, Any]) -> str:
    """Terms in words, for the history: `substitute neighbours, privacy unit column 'pid'`."""
    words = {
        "neighbours": lambda v: f"{v.value} neighbours",
        "unit": lambda v: f"privacy unit {v}",
        "period_column": lambda v: f"months cut by column {v!r}",
    }
    return ", ".join(words[term](value) for term, value in terms.items() if value is not None)


def create_scope(
    db: Database, conn: Connection, name: str, cap: Amount, terms: ScopeTerms
) -> Fraction:
    """Make the scope `name` with `cap` (in its measure's unit) and `terms`; returns the cap.

    The caller holds the creators' lock (`Database.serialise_creators`) and has seen no scope of
    this name. Its name must be canonical and differ from every existing scope's other than in
    letter case; a zcdp scope needs its δ."""
    if (problem := scope_name_problem(name)) is not None:
        raise LedgerError(problem)
    if (terms.measure is Measure.ZCDP) != (terms.delta is not None):
        raise LedgerError(f"scope {name!r}: a zcdp scope needs its δ, a pure one has none")
    if terms.composition not in get_args(Composition):
        raise LedgerError(
            f"scope {name!r}: composition must be 'sequential' or 'parallel', got "
            f"{terms.composition!r}"
        )
    exact_cap = exact_epsilon(cap, f"cap of scope {name!r}")
    names = conn.execute(select(scopes.c.name)).scalars().all()
    alike = next((other for other in names if other.casefold() == name.casefold()), None)
    if alike is not None:
        raise LedgerError(
            f"scope {name!r} differs from the existing scope {alike!r} only in letter case; "
            f"release into {alike!r}, or choose a name that is not the same budget's"
        )
    parallel = terms.composition == "parallel"
    period_column = terms.period_column if parallel else None
    conn.execute(
        insert(scopes).values(
            name=name,
            cap=str(exact_cap),
            composition=terms.composition,
            created_at=now(),
            measure=terms.measure.value,
            delta=None if terms.delta is None else repr(terms.delta),
            neighbours=None if terms.neighbours is None else terms.neighbours.value,
            privacy_unit=None if terms.unit is None else terms.unit.key,
            period_column=period_column,
        )
    )
    unit = "" if terms.measure is Measure.PURE else f", zCDP at δ = {terms.delta!r}"
    kept = describe(
        {"neighbours": terms.neighbours, "unit": terms.unit, "period_column": period_column}
    )
    record_event(
        conn,
        "scope_created",
        name,
        epsilon=exact_cap,
        detail=f"cap {terms.measure.symbol} = {amount_text(exact_cap)}, {terms.composition}"
        + unit
        + (f"; kept for life: {kept}" if kept else ""),
    )
    return exact_cap


def ensure_scope(db: Database, conn: Connection, name: str, cap: Amount, terms: ScopeTerms) -> bool:
    """Create the scope with `cap` (in its measure's unit) and `terms` if it does not exist; True
    if it was created. An existing scope keeps its cap whatever `cap` says; its terms must agree
    with `terms` (and take those it keeps none of yet, see `keep_terms`)."""
    if (problem := scope_name_problem(name)) is not None:
        raise LedgerError(problem)
    db.serialise_creators(conn)  # no row to lock yet
    row = conn.execute(select(scopes).where(scopes.c.name == name).with_for_update()).one_or_none()
    if row is not None:
        keep_terms(conn, row, terms)
        return False
    create_scope(db, conn, name, cap, terms)
    return True


def set_cap(db: Database, conn: Connection, name: str, cap: Amount, reason: str | None) -> None:
    """Change a scope's cap on purpose; the old and new caps and the reason go into the history."""
    exact_cap = exact_epsilon(cap, f"cap of scope {name!r}")
    row = db.locked_scope(conn, name)
    old = Fraction(row.cap)
    if old == exact_cap:
        return
    conn.execute(update(scopes).where(scopes.c.name == name).values(cap=str(exact_cap)))
    symbol = Measure(row.measure or Measure.PURE).symbol
    detail = f"cap {symbol} = {amount_text(old)} -> {amount_text(exact_cap)}"
    record_event(
        conn,
        "cap_changed",
        name,
        epsilon=exact_cap,
        detail=f"{detail}; reason: {reason}" if reason else detail,
    )
