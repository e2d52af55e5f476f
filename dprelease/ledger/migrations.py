"""Schema migrations: version n of a ledger is MIGRATIONS[:n] applied in order, each once.

Every migration carries its own frozen DDL (table snapshots and ALTER statements written for that
version) and its own reading of old rows, never the live definitions in `schema` or live code: a
brand-new ledger and one upgraded from any older version must end with the same tables. Never
edit a released migration; append one.

Why not Alembic: a ledger upgrades itself when a release opens it, inside the same transaction
and lock that serialise concurrent first opens (advisory lock on PostgreSQL, BEGIN IMMEDIATE on
SQLite), and its version lives in `dprelease_schema_version`, which existing ledgers already
have. A few short migrations do not justify a second version table, an env.py and a script
directory to ship with the package.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    column,
    func,
    insert,
    inspect,
    select,
    table,
    update,
)
from sqlalchemy.types import TypeEngine

from dprelease import operator
from dprelease.errors import LedgerError
from dprelease.ledger.database import now
from dprelease.ledger.events import actor

_VERSION_TABLE = "dprelease_schema_version"


def _version_table() -> Table:
    """Frozen: the bootstrap table every version has."""
    return Table(
        _VERSION_TABLE,
        MetaData(),
        Column("version", Integer, primary_key=True),
        Column("applied_at", DateTime(timezone=True), nullable=False),
    )


def _v1_tables(conn: Connection) -> None:
    """Scopes, charges, stored releases and the event history (dprelease 0.1)."""
    frozen = MetaData()
    ident = BigInteger().with_variant(Integer, "sqlite")
    Table(
        "dprelease_scopes",
        frozen,
        Column("name", String(200), primary_key=True),
        Column("cap", Text, nullable=False),
        Column("composition", String(16), nullable=False),
        Column("created_at", DateTime(timezone=True), nullable=False),
    )
    Table(
        "dprelease_charges",
        frozen,
        Column("charge_id", ident, primary_key=True, autoincrement=True),
        Column("release_id", String(500), nullable=False),
        Column("scope", String(200), ForeignKey("dprelease_scopes.name"), nullable=False),
        Column("period", String(200)),
        Column("epsilon", Text, nullable=False),
        Column("kind", String(16), nullable=False),
        Column("status", String(16), nullable=False),
        Column("run_id", String(500)),
        Column("reserved_at", DateTime(timezone=True), nullable=False),
        Column("committed_at", DateTime(timezone=True)),
        Index("ix_dprelease_charges_release_id", "release_id"),
        Index("ix_dprelease_charges_scope_period", "scope", "period"),
    )
    Table(
        "dprelease_releases",
        frozen,
        Column("charge_id", ident, ForeignKey("dprelease_charges.charge_id"), primary_key=True),
        Column("release_id", String(500), nullable=False),
        Column("table_parquet", LargeBinary, nullable=False),
        Column("table_sha256", String(64), nullable=False),
        Column("manifest", Text, nullable=False),
        Column("committed_at", DateTime(timezone=True), nullable=False),
    )
    Table(
        "dprelease_events",
        frozen,
        Column("event_id", ident, primary_key=True, autoincrement=True),
        Column("at", DateTime(timezone=True), nullable=False),
        Column("kind", String(32), nullable=False),
        Column("scope", String(200), nullable=False),
        Column("release_id", String(500)),
        Column("period", String(200)),
        Column("epsilon", Text),
        Column("charge_id", ident),
        Column("status", String(16)),
        Column("run_id", String(500)),
        Column("actor", String(300), nullable=False),
        Column("detail", Text),
        Index("ix_dprelease_events_scope", "scope"),
    )
    frozen.create_all(conn)


def _add_column(conn: Connection, table_name: str, name: str, type_: TypeEngine[Any]) -> None:
    ddl = type_.compile(dialect=conn.dialect)
    conn.exec_driver_sql(f"ALTER TABLE {table_name} ADD COLUMN {name} {ddl}")


# A version-1 release id: asset/period/<64-hex spec hash, which then included ε>.
_V1_RELEASE_ID = re.compile(r"^(?P<slot>.+/(?P<period>[^/]+))/[0-9a-f]{64}$")


def _v2_release_identity(conn: Connection) -> None:
    """Spec hash, private input fingerprint and void time on charges; release ids become slots.

    Version-1 ids ``asset/period/hash`` are shortened to the slot ``asset/period`` so that a
    re-run after the upgrade finds its stored release instead of charging again. Their spec
    hash stays NULL (the old hash included ε, so it is not comparable). Stored manifests keep
    the id they were published with; the history keeps the events as they happened, plus one
    "migrated" event per scope saying what changed.
    """
    _add_column(conn, "dprelease_charges", "spec_hash", String(64))
    _add_column(conn, "dprelease_charges", "input_fingerprint", String(128))
    _add_column(conn, "dprelease_charges", "voided_at", DateTime(timezone=True))

    charges = table(
        "dprelease_charges",
        column("charge_id"),
        column("release_id"),
        column("scope"),
        column("period"),
    )
    releases = table("dprelease_releases", column("charge_id"), column("release_id"))
    events = table(
        "dprelease_events",
        column("at", DateTime(timezone=True)),
        column("kind"),
        column("scope"),
        column("actor"),
        column("detail"),
    )
    shortened: Counter[str] = Counter()
    for charge in conn.execute(select(charges)).all():
        match = _V1_RELEASE_ID.match(charge.release_id)
        if match is None or match["period"] != (charge.period or "-"):
            continue  # not made by make_release_id: left as it is
        for target in (charges, releases):
            conn.execute(
                update(target)
                .where(target.c.charge_id == charge.charge_id)
                .values(release_id=match["slot"])
            )
        shortened[charge.scope] += 1
    for scope, count in sorted(shortened.items()):
        conn.execute(
            insert(events).values(
                at=now(),
                kind="migrated",
                scope=scope,
                actor=actor(),
                detail=f"schema 2: release ids of {count} charge{'s' * (count != 1)} shortened to "
                "asset/period "
                "(the spec hash is stored on its own now); published manifests keep their id",
            )
        )


def _v3_scope_measure(conn: Connection) -> None:
    """Each scope's measure (`pure`: amounts are ε; `zcdp`: amounts are ρ) and, for zCDP, the δ
    its odds statement is read at. Scopes of earlier ledgers spent ε: they become `pure`."""
    _add_column(conn, "dprelease_scopes", "measure", String(8))
    _add_column(conn, "dprelease_scopes", "delta", Text())
    scopes = table("dprelease_scopes", column("measure"))
    conn.execute(update(scopes).values(measure="pure"))


#: What every manifest format so far says of a release whose privacy unit is each row.
_V4_ROW_UNIT = "each row is a privacy unit"
_V4_NEIGHBOURS = ("add_remove", "substitute")


def _v4_said(manifest_json: str) -> tuple[str | None, str | None]:
    """The neighbours and the privacy unit (as kept: ``row`` or ``column:<name>``) a stored
    manifest states; None for what it does not say."""
    try:
        manifest = json.loads(manifest_json)
    except ValueError:
        return None, None
    if not isinstance(manifest, dict):
        return None, None
    neighbours = manifest.get("neighbours")
    unit = manifest.get("privacy_unit")
    bounds = manifest.get("contribution_bounds")
    how = bounds.get("how") if isinstance(bounds, dict) else None
    if unit == _V4_ROW_UNIT or how == _V4_ROW_UNIT:
        kept_unit: str | None = "row"
    else:
        kept_unit = f"column:{unit}" if isinstance(unit, str) and unit else None
    return (neighbours if neighbours in _V4_NEIGHBOURS else None), kept_unit


def _v4_unit_words(key: str) -> str:
    return "each row" if key == "row" else f"column {key.partition(':')[2]!r}"


def _v4_scope_terms(conn: Connection) -> None:
    """The rest of what a scope's guarantee rests on, kept for life like its measure: the
    neighbours its cap is read under, its privacy unit, and for parallel periods the date column
    whose months are its periods (NULL: not fixed yet; the next charge that states it fixes it).

    Read from the manifests of the scope's stored releases, oldest first. A scope that has spent
    nothing keeps nothing yet: its next release fixes all three. A scope that has spent but whose
    releases do not say one neighbour definition (none stored, an early format, or both kinds)
    keeps `substitute`: under it the cap bounds a value change's odds factor by e^cap, never more
    than the profile allowed under either definition (a cap chosen under add/remove, ln B / 2,
    gives √B; read as add/remove a cap chosen as ln B would give B²). The privacy unit is its
    releases' (the first's if they differ), else not fixed yet: the cap does not depend on it.
    The period column is in no manifest: fixed by the next release of a parallel scope. Each
    scope gets a "migrated" event saying what it keeps and why; a choice the records did not
    make is also told to the operator.
    """
    _add_column(conn, "dprelease_scopes", "neighbours", String(16))
    _add_column(conn, "dprelease_scopes", "privacy_unit", Text())
    _add_column(conn, "dprelease_scopes", "period_column", Text())
    scopes = table(
        "dprelease_scopes",
        column("name"),
        column("composition"),
        column("neighbours"),
        column("privacy_unit"),
    )
    charges = table("dprelease_charges", column("charge_id"), column("scope"), column("status"))
    releases = table("dprelease_releases", column("charge_id"), column("manifest"))
    events = table(
        "dprelease_events",
        column("at", DateTime(timezone=True)),
        column("kind"),
        column("scope"),
        column("actor"),
        column("detail"),
    )
    for name, composition in conn.execute(
        select(scopes.c.name, scopes.c.composition).order_by(scopes.c.name)
    ).all():
        spent = conn.execute(
            select(func.count())
            .select_from(charges)
            .where(charges.c.scope == name, charges.c.status.in_(("reserved", "committed")))
        ).scalar_one()
        if not spent:
            continue  # nothing spent, nothing to keep yet: its next release fixes its terms
        manifests = conn.execute(
            select(releases.c.manifest)
            .join(charges, charges.c.charge_id == releases.c.charge_id)
            .where(charges.c.scope == name)
            .order_by(charges.c.charge_id)
        ).scalars()
        said = [_v4_said(m) for m in manifests]
        told = Counter(n for n, _ in said if n is not None)
        units = list(dict.fromkeys(u for _, u in said if u is not None))
        if len(told) == 1:
            neighbours = next(iter(told))
            why = f"{neighbours} neighbours (its {sum(told.values())} stored release(s) say so)"
        else:
            neighbours = "substitute"
            found = (
                "were made under " + " and ".join(f"{k} ({n})" for k, n in sorted(told.items()))
                if told
                else "do not say which"
            )
            why = (
                f"substitute neighbours (its stored releases {found}; under substitute its cap "
                "bounds a value change's odds factor by e^cap whatever they were)"
            )
        unit = units[0] if units else None
        what = [why]
        if unit is None:
            what.append("privacy unit: not fixed yet (its next release fixes it)")
        else:
            others = f"; its releases also used {', '.join(map(_v4_unit_words, units[1:]))}"
            what.append(f"privacy unit {_v4_unit_words(unit)}" + (others if units[1:] else ""))
        if composition == "parallel":
            what.append("the column of its months: fixed by its next release")
        conn.execute(
            update(scopes)
            .where(scopes.c.name == name)
            .values(neighbours=neighbours, privacy_unit=unit)
        )
        detail = "schema 4: keeps for life " + "; ".join(what)
        conn.execute(
            insert(events).values(
                at=now(), kind="migrated", scope=name, actor=actor(), detail=detail
            )
        )
        if len(told) != 1 or len(units) > 1:
            operator.warn(f"ledger upgrade, scope {name!r}: {detail}; review its guarantee")


def _v5_selection_delta(conn: Connection) -> None:
    """Key selection's δ (`deltas`): each scope's budget for life, each charge's spending. No
    release of an earlier ledger selected keys, so every row starts NULL: none spent, no budget
    yet (a scope's first selecting release states it)."""
    _add_column(conn, "dprelease_scopes", "selection_delta", Text())
    _add_column(conn, "dprelease_charges", "selection_delta", Text())


MIGRATIONS: list[Callable[[Connection], None]] = [
    _v1_tables,
    _v2_release_identity,
    _v3_scope_measure,
    _v4_scope_terms,
    _v5_selection_delta,
]
LATEST = len(MIGRATIONS)


def installed_version(conn: Connection) -> int:
    """The ledger's schema version; 0 when it has no ledger tables at all."""
    if not inspect(conn).has_table(_VERSION_TABLE):
        return 0
    versions = _version_table()
    return conn.execute(select(func.max(versions.c.version))).scalar() or 0


def check_supported(version: int, where: str) -> None:
    """Refuse a ledger written by a newer dprelease (its rows may mean something else)."""
    if version > LATEST:
        raise LedgerError(
            f"ledger {where} has schema version {version}, newer than this dprelease "
            f"supports ({LATEST}); upgrade dprelease"
        )


def migrate(conn: Connection, where: str) -> int:
    """Apply the missing migrations in this transaction; returns the version found before.

    The caller holds the lock that serialises concurrent first opens.
    """
    found = installed_version(conn)
    check_supported(found, where)
    versions = _version_table()
    if found == 0:
        versions.create(conn)
    for version in range(found + 1, LATEST + 1):
        MIGRATIONS[version - 1](conn)
        conn.execute(insert(versions).values(version=version, applied_at=now()))
    return found
