"""The reserve → commit protocol (and void), each step one transaction in the caller's hands.

    reserve(slot, scope, period, ε, spec hash)  -- charge, resume, return the stored copy, refuse
    ... draw noise, build the table ...
    commit(reservation, table, manifest)        -- store the release; only then publish files
    void(slot, reason)                          -- end an open reservation; its ε is free again

A slot (`make_release_id`: asset/period) is released once. Re-running a released slot never
fails and never charges, whatever changed since (cap, profile, ε), unless the spec changed
(SpecChanged) or a new release is asked for (force_new, charged). Nothing is ever deleted: a
charge moves from "reserved" to "committed" or "voided" once, and every step appends an event.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import Any

from sqlalchemy import Connection, Row, insert, select, update

from dprelease.errors import (
    BudgetExhausted,
    CapAboveProfile,
    LedgerError,
    ReservationMismatch,
    SpecChanged,
    UnknownScope,
)
from dprelease.ledger.database import Database, aware, now
from dprelease.ledger.deltas import check_delta, record_delta
from dprelease.ledger.events import record_event
from dprelease.ledger.identity import scope_name_problem
from dprelease.ledger.records import (
    EventKind,
    ReleaseConflict,
    Reservation,
    ReservationStatus,
    ScopeTerms,
    StoredRelease,
    Voided,
)
from dprelease.ledger.reports import load_stored
from dprelease.ledger.schema import charges, events, releases, scopes
from dprelease.ledger.scopes import create_scope, exact_epsilon, keep_terms
from dprelease.ledger.spending import spending
from dprelease.loss import Amount, Measure, amount_text, typed_text


def _short(spec_hash: str | None) -> str:
    return "not recorded" if spec_hash is None else spec_hash[:12]


def _day(at: datetime | None) -> str:
    return "?" if at is None else aware(at).strftime("%Y-%m-%d")


@dataclass(frozen=True)
class _Run:
    """What one run asks of `reserve`."""

    release_id: str
    scope: str
    period: str | None
    epsilon: Fraction
    spec_hash: str
    run_id: str | None
    symbol: str = "ε"  # of the scope's amounts: ε, or ρ

    def reservation(self, row: Row[Any], status: ReservationStatus) -> Reservation:
        """This run's view of an existing charge (`row`)."""
        return Reservation(
            release_id=self.release_id,
            charge_id=row.charge_id,
            status=status,
            scope=self.scope,
            period=self.period,
            epsilon=Fraction(row.epsilon),
            requested_epsilon=self.epsilon,
            spec_hash=row.spec_hash,
            run_id=self.run_id,
            rerelease=row.kind == "re-release",
            committed_at=None if row.committed_at is None else aware(row.committed_at),
        )

    def event(self, conn: Connection, kind: EventKind, row: Row[Any], detail: str) -> None:
        """This run's event about a charge of its slot (`row`, in its scope and period)."""
        _charge_event(conn, kind, row, status=row.status, run_id=self.run_id, detail=detail)


def _charge_event(
    conn: Connection,
    kind: EventKind,
    row: Row[Any],
    *,
    status: str,
    run_id: str | None,
    detail: str | None = None,
) -> None:
    """Append an event about one charge (`row`): its slot, scope, period, ε and id, so the
    history of every step of every charge reads the same."""
    record_event(
        conn,
        kind,
        row.scope,
        release_id=row.release_id,
        period=row.period,
        epsilon=Fraction(row.epsilon),
        charge_id=row.charge_id,
        status=status,
        run_id=run_id,
        detail=detail,
    )


def fingerprints_differ(stored: str | None, given: str | None) -> bool | None:
    """Whether two input fingerprints ("<scheme>:<digest>") differ; None when either is unknown
    or they come from different schemes (another engine or hash version), which cannot be
    compared."""
    if stored is None or given is None:
        return None
    if stored.rpartition(":")[0] != given.rpartition(":")[0]:
        return None
    return stored != given


def input_changed(conn: Connection, charge_id: int, input_fingerprint: str) -> bool | None:
    """Compare `input_fingerprint` with the one stored with a charge (see `fingerprints_differ`)."""
    stored = conn.execute(
        select(charges.c.input_fingerprint).where(charges.c.charge_id == charge_id)
    ).scalar()
    return fingerprints_differ(stored, input_fingerprint)


def reserve(
    db: Database,
    conn: Connection,
    release_id: str,
    scope: str,
    period: str | None,
    epsilon: Amount,
    *,
    spec_hash: str,
    terms: ScopeTerms,
    run_id: str | None,
    force_new: bool,
    max_cap: Fraction | None,
    new_scope_cap: Amount | None = None,
    selection_delta: Fraction | None = None,
    selection_delta_budget: Fraction | None = None,
) -> Reservation:
    """Decide what a run of this slot does; charge only for a new release (see `Reservation`).

    In order: the release's terms must be the scope's (CompositionMismatch, MeasureMismatch,
    NeighboursMismatch, PrivacyUnitMismatch). A released slot returns the stored copy
    (SpecChanged if the spec hash differs), unless `force_new`. An open reservation is resumed if
    it is for the same spec hash and ε, else refused (ReservationMismatch: void it). Otherwise a
    new charge, refused with CapAboveProfile when the ledger's cap exceeds `max_cap` and with
    BudgetExhausted when it does not fit.

    A scope that does not exist is made with `new_scope_cap` and `terms` (UnknownScope without
    one) in this transaction, after every check has passed and just before its first charge:
    a refused first release leaves no scope behind.

    `selection_delta`: the δ the release's key selections spend, charged against the scope's
    selection δ budget (`deltas`; `selection_delta_budget` states it for a scope without one).
    """
    if not spec_hash:
        raise LedgerError(f"release {release_id!r}: a reservation needs the spec hash")
    # 0 only for a release of randomized answers (post-processing: recorded, charged nothing)
    amount = Fraction(0) if epsilon == 0 else exact_epsilon(epsilon)
    run = _Run(release_id, scope, period, amount, spec_hash, run_id, terms.measure.symbol)
    scope_row = _scope_row(db, conn, scope, creating=new_scope_cap is not None)
    if scope_row is None:
        if (problem := scope_name_problem(scope)) is not None:
            raise LedgerError(problem)
        if new_scope_cap is None:  # `_scope_row` raises first; a scope never exists capless
            raise UnknownScope(
                f"unknown budget scope {scope!r}: a release creates a scope only with its cap"
            )
        cap = exact_epsilon(new_scope_cap, f"cap of scope {scope!r}")
        composition = terms.composition
    else:
        kept = keep_terms(conn, scope_row, terms)
        cap, composition = Fraction(scope_row.cap), kept.composition
    if composition == "parallel" and period is None:
        raise LedgerError(
            f"scope {scope!r} composes periods in parallel: pass the period (partition key) "
            "the release belongs to"
        )
    live = conn.execute(
        select(charges)
        .where(charges.c.release_id == release_id, charges.c.status != "voided")
        .order_by(charges.c.charge_id.desc())
    ).all()
    for prev in live:
        if (prev.scope, prev.period) != (scope, period):
            raise LedgerError(
                f"release id {release_id!r} belongs to scope {prev.scope!r}, period "
                f"{prev.period!r}, not {scope!r}, {period!r}; a slot is released into one "
                "scope and period"
            )
    committed = next((p for p in live if p.status == "committed"), None)
    open_charge = next((p for p in live if p.status == "reserved"), None)
    if committed is not None and not force_new:
        return _reuse(conn, run, committed)
    if open_charge is not None:
        return _resume(conn, run, open_charge)
    spent = spending(conn, {scope: composition})[scope].spent(period) if scope_row else Fraction(0)
    _check_fits(run, cap, composition, spent, max_cap, terms.measure)
    parallel = composition == "parallel"
    budget = None
    if selection_delta:
        budget = check_delta(
            conn, scope_row, scope, period, parallel, selection_delta, selection_delta_budget
        )
    if scope_row is None:  # every check passed: the scope is made with its first charge
        create_scope(db, conn, scope, cap, terms)
    reservation = _charge(conn, run, cap, composition, spent, rerelease=committed is not None)
    if selection_delta and budget is not None:
        record_delta(conn, scope, reservation.charge_id, selection_delta, budget)
    return reservation


def _scope_row(db: Database, conn: Connection, scope: str, *, creating: bool) -> Row[Any] | None:
    """The scope's row, locked until the transaction ends. Missing: UnknownScope, or when
    `creating` None after taking the creators' lock (a scope has no row to lock yet), so that
    concurrent first releases of one new scope queue and the later ones find it made."""
    if not creating:
        return db.locked_scope(conn, scope)
    row = conn.execute(select(scopes).where(scopes.c.name == scope).with_for_update()).one_or_none()
    if row is not None:
        return row
    db.serialise_creators(conn)
    return conn.execute(
        select(scopes).where(scopes.c.name == scope).with_for_update()
    ).one_or_none()


def _reuse(conn: Connection, run: _Run, row: Row[Any]) -> Reservation:
    """A released slot: the stored copy, no charge, whatever changed but the spec."""
    if row.spec_hash is not None and row.spec_hash != run.spec_hash:
        raise SpecChanged(
            f"release {run.release_id!r} was released on {_day(row.committed_at)} from spec "
            f"{_short(row.spec_hash)}; this spec is {_short(run.spec_hash)}. A released slot "
            "is only re-run with its own spec: restore that spec, or release the changed spec "
            "anew with --force-new (force_new=True; charged again)"
        )
    same = Fraction(row.epsilon) == run.epsilon
    asked = "" if same else f" (this run asked for {run.symbol} = {amount_text(run.epsilon)})"
    run.event(conn, "reused", row, f"served the stored release; no charge{asked}")
    return run.reservation(row, "committed")


def _resume(conn: Connection, run: _Run, row: Row[Any]) -> Reservation:
    """Take over the slot's open reservation: no second charge.

    The ledger cannot tell a run that died before commit from one still drawing: both leave an
    open reservation. Taking it over is safe either way: one charge covers both runs, and only
    the first commit is stored (the other run gets ReleaseConflict and publishes that one).
    """
    if row.spec_hash != run.spec_hash or Fraction(row.epsilon) != run.epsilon:
        raise ReservationMismatch(
            f"release {run.release_id!r} has an open reservation (charge {row.charge_id}, run "
            f"{row.run_id}, reserved {_day(row.reserved_at)}) for {run.symbol} = "
            f"{amount_text(Fraction(row.epsilon))} and spec {_short(row.spec_hash)}; this run "
            f"asks for {run.symbol} = {amount_text(run.epsilon)} and spec "
            f"{_short(run.spec_hash)}. An open reservation has published nothing: if its run is "
            f"dead, end it with `dprelease ledger void {run.release_id} --reason TEXT`, then "
            "run again"
        )
    owner = f"run {row.run_id}" if row.run_id else "an earlier run"
    run.event(
        conn,
        "resumed",
        row,
        f"took over the open reservation of {owner} (dead, or still running); not charged again",
    )
    return run.reservation(row, "resumed")


def _check_fits(
    run: _Run,
    cap: Fraction,
    composition: str,
    spent: Fraction,
    max_cap: Fraction | None,
    measure: Measure,
) -> None:
    """Refuse a new charge the scope cannot take: its cap above what the profile allows
    (CapAboveProfile), or more than it has left (BudgetExhausted); the scope row is locked (or,
    for a new scope, the creators' lock held), so the check holds until the charge is made."""
    symbol = measure.symbol
    if max_cap is not None and cap > max_cap:
        raise CapAboveProfile(
            f"budget scope {run.scope!r} has cap {symbol} = {amount_text(cap)} in the ledger, "
            f"more than the privacy profile allows ({symbol} = {amount_text(max_cap)}); nothing "
            f"was spent. Lower it with `dprelease ledger set-cap {run.scope} {typed_text(max_cap)} "
            "--reason TEXT`, or change the profile"
        )
    parallel = composition == "parallel"
    if spent + run.epsilon > cap:  # the transaction rolls back: nothing written
        raise BudgetExhausted(
            run.scope,
            spent,
            cap,
            run.epsilon,
            composition=composition,
            period=run.period if parallel else None,
            measure=measure,
        )


def _charge(
    conn: Connection,
    run: _Run,
    cap: Fraction,
    composition: str,
    spent: Fraction,
    *,
    rerelease: bool,
) -> Reservation:
    """A new charge, once `_check_fits` has passed."""
    parallel = composition == "parallel"
    row = conn.execute(
        insert(charges)
        .values(
            release_id=run.release_id,
            scope=run.scope,
            period=run.period,
            epsilon=str(run.epsilon),
            kind="re-release" if rerelease else "release",
            status="reserved",
            run_id=run.run_id,
            reserved_at=now(),
            spec_hash=run.spec_hash,
        )
        .returning(*charges.c)
    ).one()
    run.event(
        conn,
        "re-reserved" if rerelease else "reserved",
        row,
        f"spent {amount_text(spent + run.epsilon)} of cap {amount_text(cap)}"
        + (f" in period {run.period}" if parallel else ""),
    )
    return run.reservation(row, "reserved")


def commit(
    db: Database,
    conn: Connection,
    reservation: Reservation,
    table_parquet: bytes,
    manifest_json: str,
    input_fingerprint: str | None,
) -> StoredRelease:
    """Store the release of an open reservation, with this run's private input fingerprint.

    Raises ReleaseConflict if another run committed the same charge first (two runs resumed one
    reservation): publish `exc.stored` then, never this run's table.
    """
    row = conn.execute(
        select(charges).where(charges.c.charge_id == reservation.charge_id).with_for_update()
    ).one_or_none()
    if row is None or row.release_id != reservation.release_id:
        raise LedgerError(
            f"no reservation {reservation.charge_id} for release {reservation.release_id!r} in "
            f"ledger {db.display_url}; call reserve first"
        )
    if row.status == "committed":
        raise ReleaseConflict(reservation.release_id, load_stored(conn, row.charge_id))
    if row.status == "voided":
        raise LedgerError(
            f"the reservation of {reservation.release_id!r} (charge {row.charge_id}) was voided "
            "while this run was drawing; its table was not stored and nothing may be "
            "published. Run again for a new, charged release"
        )
    at = now()
    conn.execute(
        insert(releases).values(
            charge_id=row.charge_id,
            release_id=row.release_id,
            table_parquet=bytes(table_parquet),
            table_sha256=hashlib.sha256(table_parquet).hexdigest(),
            manifest=manifest_json,
            committed_at=at,
        )
    )
    conn.execute(
        update(charges)
        .where(charges.c.charge_id == row.charge_id)
        .values(status="committed", committed_at=at, input_fingerprint=input_fingerprint)
    )
    _charge_event(conn, "committed", row, status="committed", run_id=reservation.run_id)
    return StoredRelease(
        release_id=row.release_id,
        charge_id=row.charge_id,
        epsilon=Fraction(row.epsilon),
        spec_hash=row.spec_hash,
        table_parquet=bytes(table_parquet),
        manifest=json.loads(manifest_json),
        committed_at=at,
    )


def seal(conn: Connection, reservation: Reservation, detail: str) -> str:
    """Mark an open reservation as one whose noisy output leaves before commit (a consortium's
    encrypted sum, handed to its key holder): `void` refuses it from now on. Sealing again
    returns the first seal's detail unchanged (the caller compares it with its own)."""
    row = conn.execute(
        select(charges).where(charges.c.charge_id == reservation.charge_id).with_for_update()
    ).one_or_none()
    if row is None or row.status != "reserved":
        raise LedgerError(
            f"no open reservation {reservation.charge_id} for release "
            f"{reservation.release_id!r} to seal"
        )
    if (earlier := sealed_detail(conn, row.release_id)) is not None:
        return earlier
    _charge_event(conn, "sealed", row, status="reserved", run_id=reservation.run_id, detail=detail)
    return detail


def sealed_detail(conn: Connection, release_id: str) -> str | None:
    """The detail of the seal on the slot's open reservation, if it has one."""
    found = conn.execute(
        select(events.c.detail)
        .join(charges, charges.c.charge_id == events.c.charge_id)
        .where(
            events.c.kind == "sealed",
            events.c.release_id == release_id,
            charges.c.status == "reserved",
        )
        .order_by(events.c.event_id)
    ).first()
    return None if found is None else str(found.detail)


def void(conn: Connection, release_id: str, reason: str) -> Voided:
    """End the open reservations of a slot; their ε is no longer spent. Committed: refused.

    An open reservation has published nothing (files are written only after commit), so ending
    it returns its budget without weakening any guarantee.
    """
    if not reason or not reason.strip():
        raise LedgerError("voiding a reservation needs a reason (--reason TEXT), for the history")
    rows = conn.execute(
        select(charges)
        .where(charges.c.release_id == release_id)
        .order_by(charges.c.charge_id)
        .with_for_update()
    ).all()
    open_rows = [r for r in rows if r.status == "reserved"]
    if sealed := sealed_detail(conn, release_id):
        raise LedgerError(
            f"release {release_id!r} is sealed ({sealed}): its noisy output left before commit, "
            "so its budget is spent for good and cannot be voided. Nothing was changed"
        )
    if not open_rows:
        done = [r for r in rows if r.status == "committed"]
        if done:
            raise LedgerError(
                f"release {release_id!r} was committed on {_day(done[-1].committed_at)} (charge "
                f"{done[-1].charge_id}); a committed release can never be voided: its files may "
                "be public and its ε is spent for good. Nothing was changed"
            )
        raise LedgerError(
            f"release {release_id!r} has no open reservation to void"
            + (" (it was voided already)" if rows else "")
        )
    at = now()
    for row in open_rows:
        conn.execute(
            update(charges)
            .where(charges.c.charge_id == row.charge_id)
            .values(status="voided", voided_at=at)
        )
        _charge_event(
            conn,
            "voided",
            row,
            status="voided",
            run_id=row.run_id,
            detail=f"reason: {reason.strip()}",
        )
    first = open_rows[0]
    return Voided(
        release_id=release_id,
        scope=first.scope,
        period=first.period,
        charge_ids=tuple(r.charge_id for r in open_rows),
        epsilon=sum((Fraction(r.epsilon) for r in open_rows), Fraction(0)),
    )
