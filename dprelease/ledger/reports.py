"""Reading the ledger: stored releases, status, history and the audit export. Never writes.

Each function reads in the caller's transaction, so one export is one consistent snapshot. The
private input fingerprint is never read here: nothing that leaves the ledger can carry it.
"""

from __future__ import annotations

import base64
import json
from fractions import Fraction
from typing import Any

from sqlalchemy import Connection, func, select

from dprelease.errors import UnknownScope
from dprelease.ledger.database import aware, now
from dprelease.ledger.deltas import delta_spent_by_scope
from dprelease.ledger.records import LedgerEvent, ScopeStatus, StoredRelease
from dprelease.ledger.schema import charges, events, releases, scopes
from dprelease.ledger.scopes import terms_of
from dprelease.ledger.spending import spending
from dprelease.loss import Measure

#: 2: spec hashes, voided charges, slot release ids; 3: each scope's terms (neighbours, privacy
#: unit, period column), and the unit (ε or ρ) of every charge's and event's amount.
EXPORT_FORMAT = "dprelease-ledger-export/3"


def load_stored(conn: Connection, charge_id: int) -> StoredRelease:
    """The stored release of one committed charge."""
    row = conn.execute(
        select(releases, charges.c.epsilon, charges.c.spec_hash)
        .join(charges, charges.c.charge_id == releases.c.charge_id)
        .where(releases.c.charge_id == charge_id)
    ).one()
    return StoredRelease(
        release_id=row.release_id,
        charge_id=row.charge_id,
        epsilon=Fraction(row.epsilon),
        spec_hash=row.spec_hash,
        table_parquet=bytes(row.table_parquet),
        manifest=json.loads(row.manifest),
        committed_at=aware(row.committed_at),
    )


def stored_release(conn: Connection, release_id: str) -> StoredRelease | None:
    """The latest committed release of this slot (re-releases supersede), or None."""
    charge_id = conn.execute(
        select(func.max(releases.c.charge_id)).where(releases.c.release_id == release_id)
    ).scalar()
    return None if charge_id is None else load_stored(conn, charge_id)


def status(conn: Connection, display_url: str, scope: str | None = None) -> list[ScopeStatus]:
    """Cap, spent and remaining per scope; open reservations count as spent (fail safe)."""
    query = select(scopes).order_by(scopes.c.name)
    if scope is not None:
        query = query.where(scopes.c.name == scope)
    rows = conn.execute(query).all()
    if scope is not None and not rows:
        raise UnknownScope(f"unknown budget scope {scope!r} in ledger {display_url}")
    spent = spending(conn, {row.name: row.composition for row in rows})
    counts_query = (
        select(charges.c.scope, charges.c.status, func.count())
        .where(charges.c.scope.in_([row.name for row in rows]))
        .group_by(charges.c.scope, charges.c.status)
    )
    counts = {(name, state): n for name, state, n in conn.execute(counts_query)}
    deltas_spent = delta_spent_by_scope(
        conn, {row.name: row.composition == "parallel" for row in rows}
    )
    result = []
    for row in rows:
        cap, used, terms = Fraction(row.cap), spent[row.name].spent(), terms_of(row)
        result.append(
            ScopeStatus(
                name=row.name,
                cap=cap,
                spent=used,
                remaining=max(cap - used, Fraction(0)),
                composition=terms.composition,
                measure=terms.measure,
                delta=terms.delta,
                periods=spent[row.name].by_period,
                releases=counts.get((row.name, "committed"), 0),
                open_reservations=counts.get((row.name, "reserved"), 0),
                neighbours=terms.neighbours,
                privacy_unit=terms.unit,
                period_column=terms.period_column,
                selection_delta=None
                if row.selection_delta is None
                else Fraction(row.selection_delta),
                selection_delta_spent=deltas_spent[row.name],
            )
        )
    return result


def _measures(conn: Connection) -> dict[str, Measure]:
    """Each scope's measure: the unit of the amounts recorded about it."""
    rows = conn.execute(select(scopes.c.name, scopes.c.measure)).all()
    return {name: Measure(measure or Measure.PURE) for name, measure in rows}


def history(conn: Connection, scope: str | None = None) -> list[LedgerEvent]:
    """Every event, oldest first (append-only: nothing is ever updated or deleted)."""
    measures = _measures(conn)
    query = select(events).order_by(events.c.event_id)
    if scope is not None:
        query = query.where(events.c.scope == scope)
    return [
        LedgerEvent(
            event_id=r.event_id,
            at=aware(r.at),
            kind=r.kind,
            scope=r.scope,
            release_id=r.release_id,
            period=r.period,
            epsilon=None if r.epsilon is None else Fraction(r.epsilon),
            charge_id=r.charge_id,
            status=r.status,
            run_id=r.run_id,
            actor=r.actor,
            detail=r.detail,
            measure=measures.get(r.scope, Measure.PURE),
        )
        for r in conn.execute(query)
    ]


def _charge_dict(c: Any, measures: dict[str, Measure]) -> dict[str, Any]:
    return {
        "charge_id": c.charge_id,
        "unit": measures.get(c.scope, Measure.PURE).symbol,
        "release_id": c.release_id,
        "scope": c.scope,
        "period": c.period,
        "epsilon": float(Fraction(c.epsilon)),
        "epsilon_exact": c.epsilon,
        "kind": c.kind,
        "status": c.status,
        "spec_hash": c.spec_hash,
        "run_id": c.run_id,
        "reserved_at": aware(c.reserved_at).isoformat(),
        "committed_at": c.committed_at and aware(c.committed_at).isoformat(),
        "voided_at": c.voided_at and aware(c.voided_at).isoformat(),
    }


def export(
    conn: Connection,
    display_url: str,
    schema_version: int,
    scope: str | None = None,
    *,
    include_tables: bool = False,
) -> dict[str, Any]:
    """A JSON-serialisable dump for audits and backups, without the private input fingerprints.

    Tables are left out by default (they can be large, and their sha256 lets an auditor match
    published files); `include_tables=True` adds them base64-encoded.
    """
    statuses = status(conn, display_url, scope)
    measures = _measures(conn)
    public_charge_columns = [c for c in charges.c if c.name != "input_fingerprint"]
    charge_q = select(*public_charge_columns).order_by(charges.c.charge_id)
    release_q = select(releases).order_by(releases.c.charge_id)
    if scope is not None:
        charge_q = charge_q.where(charges.c.scope == scope)
        release_q = release_q.where(
            releases.c.charge_id.in_(select(charges.c.charge_id).where(charges.c.scope == scope))
        )
    return {
        "format": EXPORT_FORMAT,
        "schema_version": schema_version,
        "ledger": display_url,
        "exported_at": now().isoformat(),
        "scopes": [s.to_dict() for s in statuses],
        "charges": [_charge_dict(c, measures) for c in conn.execute(charge_q)],
        "releases": [
            {
                "charge_id": r.charge_id,
                "release_id": r.release_id,
                "committed_at": aware(r.committed_at).isoformat(),
                "table_sha256": r.table_sha256,
                "table_bytes": len(r.table_parquet),
                "manifest": json.loads(r.manifest),
                **(
                    {"table_parquet_base64": base64.b64encode(r.table_parquet).decode()}
                    if include_tables
                    else {}
                ),
            }
            for r in conn.execute(release_q)
        ],
        "events": [e.to_dict() for e in history(conn, scope)],
    }
