"""The persistent privacy-budget ledger: every charge against a scope's cap, and every release.

Why it exists: DP guarantees compose across releases about the same people, so the budget must be
tracked across scheduled runs, UI re-runs and backfills, i.e. outside any one process. The
protocol (DESIGN.md §5) is

    reserve(release_id, scope, period, epsilon)  -- charge, or refuse with BudgetExhausted
    ... draw noise, build the table ...
    commit(reservation, table_parquet, manifest) -- store the release; only then publish files

each step one transaction, safe under concurrent processes:

* SQLite: every transaction starts with ``BEGIN IMMEDIATE`` (the database write lock), so the
  budget check and the insert cannot interleave with another writer; a busy timeout makes
  waiting writers queue instead of failing.
* PostgreSQL: ``SELECT ... FOR UPDATE`` on the scope row serialises reservations per scope; the
  schema migration takes a transaction-level advisory lock.

Epsilon is stored exactly, as a rational ``"p/q"`` string, and summed with ``Fraction``: no
rounding can let the total pass the cap. A float is taken as the decimal it prints as
(``0.1`` -> 1/10), the number the steward wrote down, so cap 0.3 admits three charges of 0.1.

Nothing is ever deleted. A charge row moves from ``reserved`` to ``committed`` once; every step
(and every repeated request served from the store) also appends a row to ``events``.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import json
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal, get_args

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    DateTime,
    Engine,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    event,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

from dprelease.errors import BudgetExhausted, LedgerError, ReleaseConflict
from dprelease.rational import Epsilon, exact_positive

Composition = Literal["sequential", "parallel"]
ReservationStatus = Literal["reserved", "resumed", "committed"]

LEDGER_URL_ENV = "DPRELEASE_LEDGER_URL"
DEFAULT_LEDGER_PATH = ".dprelease/ledger.sqlite"
SQLITE_BUSY_TIMEOUT_S = 60.0
PG_CONNECT_TIMEOUT_S = 10
_PG_SCHEMA_LOCK = 0x64707265_6C656467  # "dpreledg": serialises concurrent first opens

# --------------------------------------------------------------------------------------------
# Schema. Version n of the schema is MIGRATIONS[:n] applied in order; never edit a released
# migration, append a new one (ALTER ...) instead.
# --------------------------------------------------------------------------------------------

metadata = MetaData()

schema_version = Table(
    "dprelease_schema_version",
    metadata,
    Column("version", Integer, primary_key=True),
    Column("applied_at", DateTime(timezone=True), nullable=False),
)

scopes = Table(
    "dprelease_scopes",
    metadata,
    Column("name", String(200), primary_key=True),
    Column("cap", Text, nullable=False),  # exact rational "p/q"
    Column("composition", String(16), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

charges = Table(
    "dprelease_charges",
    metadata,
    Column(
        "charge_id",
        BigInteger().with_variant(Integer, "sqlite"),
        primary_key=True,
        autoincrement=True,
    ),
    Column("release_id", String(500), nullable=False),
    Column("scope", String(200), ForeignKey("dprelease_scopes.name"), nullable=False),
    Column("period", String(200)),
    Column("epsilon", Text, nullable=False),  # exact rational "p/q"
    Column("kind", String(16), nullable=False),  # "release" | "re-release"
    Column("status", String(16), nullable=False),  # "reserved" -> "committed"
    Column("run_id", String(500)),
    Column("reserved_at", DateTime(timezone=True), nullable=False),
    Column("committed_at", DateTime(timezone=True)),
    Index("ix_dprelease_charges_release_id", "release_id"),
    Index("ix_dprelease_charges_scope_period", "scope", "period"),
)

releases = Table(
    "dprelease_releases",
    metadata,
    Column(
        "charge_id",
        BigInteger().with_variant(Integer, "sqlite"),
        ForeignKey("dprelease_charges.charge_id"),
        primary_key=True,
    ),
    Column("release_id", String(500), nullable=False),
    Column("table_parquet", LargeBinary, nullable=False),
    Column("table_sha256", String(64), nullable=False),
    Column("manifest", Text, nullable=False),  # JSON
    Column("committed_at", DateTime(timezone=True), nullable=False),
)

events = Table(
    "dprelease_events",
    metadata,
    Column(
        "event_id",
        BigInteger().with_variant(Integer, "sqlite"),
        primary_key=True,
        autoincrement=True,
    ),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("scope", String(200), nullable=False),
    Column("release_id", String(500)),
    Column("period", String(200)),
    Column("epsilon", Text),
    Column("charge_id", BigInteger().with_variant(Integer, "sqlite")),
    Column("status", String(16)),
    Column("run_id", String(500)),
    Column("actor", String(300), nullable=False),
    Column("detail", Text),
    Index("ix_dprelease_events_scope", "scope"),
)


def _migration_1(conn: Connection) -> None:
    metadata.create_all(conn, tables=[scopes, charges, releases, events])


MIGRATIONS: list[Callable[[Connection], None]] = [_migration_1]

# --------------------------------------------------------------------------------------------
# Values handed to callers
# --------------------------------------------------------------------------------------------

EventKind = Literal[
    "scope_created",  # ensure_scope made a new scope
    "cap_changed",  # set_cap changed a cap on purpose
    "reserved",  # a new charge (first release of this id)
    "re-reserved",  # a new charge for an id already released (force_new)
    "resumed",  # an uncommitted reservation picked up again: no charge
    "committed",  # the release was stored
    "reused",  # a repeated request served from the store: no charge
]


@dataclass(frozen=True)
class Reservation:
    """The outcome of `Ledger.reserve`.

    ``status``: "reserved" (a new charge), "resumed" (an earlier uncommitted reservation of the same
    release id, no second charge) or "committed" (already stored, nothing charged: return
    `Ledger.stored_release(release_id)` instead of releasing again).
    """

    release_id: str
    charge_id: int
    status: ReservationStatus
    scope: str
    period: str | None
    epsilon: Fraction
    run_id: str | None
    rerelease: bool = False


@dataclass(frozen=True)
class StoredRelease:
    release_id: str
    charge_id: int
    table_parquet: bytes
    manifest: dict[str, Any]
    committed_at: datetime


@dataclass(frozen=True)
class ScopeStatus:
    """Budget of one scope. For parallel scopes `spent`/`remaining` are the worst period's."""

    name: str
    cap: Fraction
    spent: Fraction
    remaining: Fraction
    composition: Composition
    periods: dict[str | None, Fraction] = field(default_factory=dict)  # spent per period
    releases: int = 0  # committed releases
    open_reservations: int = 0  # reserved, never committed (counted as spent)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "composition": self.composition,
            "cap": float(self.cap),
            "spent": float(self.spent),
            "remaining": float(self.remaining),
            "cap_exact": str(self.cap),
            "spent_exact": str(self.spent),
            "remaining_exact": str(self.remaining),
            "releases": self.releases,
            "open_reservations": self.open_reservations,
            "periods": {
                ("-" if p is None else p): {"spent": float(s), "spent_exact": str(s)}
                for p, s in self.periods.items()
            },
        }


@dataclass(frozen=True)
class LedgerEvent:
    event_id: int
    at: datetime
    kind: EventKind
    scope: str
    release_id: str | None
    period: str | None
    epsilon: Fraction | None
    charge_id: int | None
    status: str | None
    run_id: str | None
    actor: str
    detail: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "at": self.at.isoformat(),
            "kind": self.kind,
            "scope": self.scope,
            "release_id": self.release_id,
            "period": self.period,
            "epsilon": None if self.epsilon is None else float(self.epsilon),
            "epsilon_exact": None if self.epsilon is None else str(self.epsilon),
            "charge_id": self.charge_id,
            "status": self.status,
            "run_id": self.run_id,
            "actor": self.actor,
            "detail": self.detail,
        }


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def exact_epsilon(value: Epsilon, what: str = "epsilon") -> Fraction:
    """`value` as an exact positive rational; a float counts as the decimal it prints as."""
    try:
        return exact_positive(value)
    except ValueError as exc:
        raise LedgerError(f"{what} {exc}") from None


def resolve_ledger_url(
    url: str | None = None, default_path: str | Path = DEFAULT_LEDGER_PATH
) -> str:
    """The ledger to use: explicit `url` > env DPRELEASE_LEDGER_URL > SQLite file at default_path.

    A value without ``://`` is taken as a SQLite file path; its parent directories are created
    so a fresh checkout (or `--ledger out/ledger.sqlite`) works without setup. `Ledger.created`
    tells callers when that opened a brand-new, empty ledger.
    """
    chosen = url or os.environ.get(LEDGER_URL_ENV)
    if chosen and "://" in chosen:
        return chosen
    path = (Path(chosen) if chosen else Path(default_path)).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def make_release_id(asset: str, period: str | None, spec_hash: str) -> str:
    """``asset/period/spec_hash`` ("-" for no period): same inputs, same id, so re-runs match."""
    for name, value in (("asset", asset), ("spec_hash", spec_hash)):
        if not value or not value.strip():
            raise LedgerError(f"release id needs a non-empty {name}")
    return f"{asset}/{'-' if period is None else period}/{spec_hash}"


def _now() -> datetime:
    return datetime.now(UTC)


def _aware(value: datetime) -> datetime:
    """SQLite hands back naive datetimes; everything we store is UTC."""
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (some containers)
        user = f"uid{os.getuid()}"
    return f"{user}@{socket.gethostname()} pid {os.getpid()}"


def _fmt(value: Fraction) -> str:
    return f"{float(value):.6g}"


# --------------------------------------------------------------------------------------------
# The ledger
# --------------------------------------------------------------------------------------------


class Ledger:
    """A connection to one ledger database (SQLite file or PostgreSQL)."""

    created: bool  # True when this open created the schema: a new, empty ledger

    def __init__(
        self, url: str | None = None, *, default_path: str | Path = DEFAULT_LEDGER_PATH
    ) -> None:
        self.url = resolve_ledger_url(url, default_path)
        try:
            parsed = make_url(self.url)
            self.display_url = parsed.render_as_string(hide_password=True)
            self._engine = self._create_engine(parsed.get_backend_name())
        except (ArgumentError, NoSuchModuleError, ValueError) as exc:
            raise LedgerError(
                f"cannot use ledger URL {self.url!r}: {exc}. Use a SQLite path, "
                "sqlite:///path/to/ledger.sqlite or postgresql+psycopg://user:pw@host/db"
            ) from None
        self._is_pg = self._engine.dialect.name == "postgresql"
        self.schema_version = self._migrate()

    def _create_engine(self, backend: str) -> Engine:
        if backend == "sqlite":
            engine = create_engine(self.url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})

            # pysqlite opens transactions lazily and only for DML; take over (documented
            # SQLAlchemy recipe) so every transaction starts with BEGIN IMMEDIATE = write lock.
            @event.listens_for(engine, "connect")
            def _sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
                dbapi_conn.isolation_level = None
                cursor = dbapi_conn.cursor()
                cursor.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
                cursor.execute("PRAGMA foreign_keys = ON")
                cursor.close()

            @event.listens_for(engine, "begin")
            def _sqlite_begin(conn: Connection) -> None:
                conn.exec_driver_sql("BEGIN IMMEDIATE")

            return engine
        if backend == "postgresql":
            return create_engine(
                self.url,
                connect_args={"connect_timeout": PG_CONNECT_TIMEOUT_S},
                pool_pre_ping=True,
            )
        raise ValueError(f"unsupported database {backend!r} (SQLite and PostgreSQL are)")

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        """One transaction; database failures become LedgerError (fail closed, no traceback)."""
        try:
            with self._engine.begin() as conn:
                yield conn
        except SQLAlchemyError as exc:
            orig = getattr(exc, "orig", None) or exc
            reason = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
            raise LedgerError(
                f"ledger {self.display_url} is unreachable or corrupt ({reason}); nothing was "
                "charged or published. Check the ledger URL/server, or restore the ledger file "
                "from a backup."
            ) from None

    def _migrate(self) -> int:
        """Bring the schema to len(MIGRATIONS); safe when several processes open a new ledger."""
        with self._tx() as conn:
            if self._is_pg:
                conn.execute(select(func.pg_advisory_xact_lock(_PG_SCHEMA_LOCK)))
            schema_version.create(conn, checkfirst=True)
            current = conn.execute(select(func.max(schema_version.c.version))).scalar() or 0
            if current > len(MIGRATIONS):
                raise LedgerError(
                    f"ledger {self.display_url} has schema version {current}, newer than this "
                    f"dprelease supports ({len(MIGRATIONS)}); upgrade dprelease"
                )
            self.created = current == 0  # an empty ledger: no scope, nothing ever spent
            for version in range(current + 1, len(MIGRATIONS) + 1):
                MIGRATIONS[version - 1](conn)
                conn.execute(insert(schema_version).values(version=version, applied_at=_now()))
            return len(MIGRATIONS)

    def _event(self, conn: Connection, kind: EventKind, scope: str, **values: Any) -> None:
        if isinstance(values.get("epsilon"), Fraction):
            values["epsilon"] = str(values["epsilon"])
        conn.execute(
            insert(events).values(at=_now(), kind=kind, scope=scope, actor=_actor(), **values)
        )

    def _locked_scope(self, conn: Connection, name: str) -> Any:
        """The scope row, locked for this transaction (PostgreSQL row lock; SQLite holds the
        database write lock since BEGIN IMMEDIATE)."""
        row = conn.execute(
            select(scopes).where(scopes.c.name == name).with_for_update()
        ).one_or_none()
        if row is None:
            raise LedgerError(
                f"unknown budget scope {name!r} in ledger {self.display_url}; create it first "
                "(Ledger.ensure_scope(name, cap, composition))"
            )
        return row

    # -- scopes ----------------------------------------------------------------------------

    def ensure_scope(
        self, name: str, cap: Epsilon, composition: Composition = "sequential"
    ) -> ScopeStatus:
        """Create the scope, or confirm an existing one has exactly these settings.

        A different cap is refused rather than silently applied: changing a lifetime budget is
        a decision to record (`set_cap`), not a side effect of editing a config file.
        """
        if not name or not name.strip():
            raise LedgerError("scope name must be non-empty")
        if composition not in get_args(Composition):
            raise LedgerError(
                f"scope {name!r}: composition must be 'sequential' or 'parallel', "
                f"got {composition!r}"
            )
        exact_cap = exact_epsilon(cap, f"cap of scope {name!r}")
        with self._tx() as conn:
            if self._is_pg:  # no row to lock yet: serialise concurrent creators
                conn.execute(select(func.pg_advisory_xact_lock(_PG_SCHEMA_LOCK)))
            row = conn.execute(
                select(scopes).where(scopes.c.name == name).with_for_update()
            ).one_or_none()
            if row is None:
                conn.execute(
                    insert(scopes).values(
                        name=name, cap=str(exact_cap), composition=composition, created_at=_now()
                    )
                )
                self._event(
                    conn,
                    "scope_created",
                    name,
                    epsilon=exact_cap,
                    detail=f"cap {exact_cap} ({_fmt(exact_cap)}), {composition}",
                )
            else:
                stored_cap = Fraction(row.cap)
                if row.composition != composition:
                    raise LedgerError(
                        f"scope {name!r} already exists with {row.composition} composition, "
                        f"not {composition}; composition cannot change once budget may have been "
                        "spent: use a new scope name"
                    )
                if stored_cap != exact_cap:
                    raise LedgerError(
                        f"scope {name!r} already exists with cap {_fmt(stored_cap)} "
                        f"({stored_cap}), not {_fmt(exact_cap)}; to change it deliberately run "
                        f"`dprelease ledger set-cap {name} <cap>` (Ledger.set_cap), which is "
                        "recorded in the history"
                    )
        return self.status(name)[0]

    def set_cap(self, name: str, cap: Epsilon, *, reason: str | None = None) -> ScopeStatus:
        """Change a scope's cap on purpose; the old and new caps go into the history."""
        exact_cap = exact_epsilon(cap, f"cap of scope {name!r}")
        with self._tx() as conn:
            row = self._locked_scope(conn, name)
            old = Fraction(row.cap)
            if old != exact_cap:
                conn.execute(update(scopes).where(scopes.c.name == name).values(cap=str(exact_cap)))
                detail = f"cap {old} ({_fmt(old)}) -> {exact_cap} ({_fmt(exact_cap)})"
                self._event(
                    conn,
                    "cap_changed",
                    name,
                    epsilon=exact_cap,
                    detail=f"{detail}; reason: {reason}" if reason else detail,
                )
        return self.status(name)[0]

    # -- the protocol ----------------------------------------------------------------------

    def reserve(
        self,
        release_id: str,
        scope: str,
        period: str | None,
        epsilon: Epsilon,
        *,
        run_id: str | None = None,
        force_new: bool = False,
    ) -> Reservation:
        """Charge `epsilon` to `scope` for this release, atomically, or raise BudgetExhausted.

        Same release id again: a committed release is returned as status "committed" with no
        charge (unless `force_new`, which charges again as a re-release); an uncommitted one (a
        crashed run, nothing published) is "resumed" with no charge, even with `force_new`.
        """
        eps = exact_epsilon(epsilon)
        with self._tx() as conn:
            row = self._locked_scope(conn, scope)
            if row.composition == "parallel" and period is None:
                raise LedgerError(
                    f"scope {scope!r} composes periods in parallel: pass the period "
                    "(partition key) the release belongs to"
                )
            previous = conn.execute(
                select(charges)
                .where(charges.c.release_id == release_id)
                .order_by(charges.c.charge_id.desc())
            ).all()
            for prev in previous:
                if (prev.scope, prev.period, Fraction(prev.epsilon)) != (scope, period, eps):
                    raise LedgerError(
                        f"release id {release_id!r} was charged before as scope {prev.scope!r}, "
                        f"period {prev.period!r}, epsilon {_fmt(Fraction(prev.epsilon))}; now "
                        f"{scope!r}, {period!r}, {_fmt(eps)}. A changed release needs a new "
                        "release id (the spec hash is part of it)"
                    )
            open_charge = next((p for p in previous if p.status == "reserved"), None)
            committed = next((p for p in previous if p.status == "committed"), None)
            common = {"release_id": release_id, "period": period, "epsilon": eps, "run_id": run_id}
            if open_charge is not None:
                self._event(
                    conn,
                    "resumed",
                    scope,
                    charge_id=open_charge.charge_id,
                    status="reserved",
                    **common,
                    detail=f"reserved by run {open_charge.run_id}; not charged again",
                )
                return Reservation(
                    charge_id=open_charge.charge_id,
                    status="resumed",
                    scope=scope,
                    rerelease=open_charge.kind == "re-release",
                    **common,
                )
            if committed is not None and not force_new:
                self._event(
                    conn,
                    "reused",
                    scope,
                    charge_id=committed.charge_id,
                    status="committed",
                    **common,
                    detail="served the stored release; no charge",
                )
                return Reservation(
                    charge_id=committed.charge_id,
                    status="committed",
                    scope=scope,
                    rerelease=committed.kind == "re-release",
                    **common,
                )

            cap = Fraction(row.cap)
            # Exact sum in Python; grouping first keeps it cheap (releases reuse a few epsilons).
            spent_query = (
                select(charges.c.epsilon, func.count())
                .where(charges.c.scope == scope)
                .group_by(charges.c.epsilon)
            )
            if row.composition == "parallel":
                spent_query = spent_query.where(charges.c.period == period)
            spent = sum((Fraction(e) * n for e, n in conn.execute(spent_query)), Fraction(0))
            if spent + eps > cap:
                label = scope if row.composition == "sequential" else f"{scope}, period {period}"
                exc = BudgetExhausted(label, float(spent), float(cap), float(eps))
                exc.scope = scope
                raise exc  # the transaction rolls back: nothing written

            rerelease = committed is not None
            charge_id = conn.execute(
                insert(charges).values(
                    release_id=release_id,
                    scope=scope,
                    period=period,
                    epsilon=str(eps),
                    kind="re-release" if rerelease else "release",
                    status="reserved",
                    run_id=run_id,
                    reserved_at=_now(),
                )
            ).inserted_primary_key[0]
            self._event(
                conn,
                "re-reserved" if rerelease else "reserved",
                scope,
                charge_id=charge_id,
                status="reserved",
                **common,
                detail=f"spent {_fmt(spent + eps)} of cap {_fmt(cap)}"
                + (f" in period {period}" if row.composition == "parallel" else ""),
            )
            return Reservation(
                charge_id=charge_id, status="reserved", scope=scope, rerelease=rerelease, **common
            )

    def commit(
        self, reservation: Reservation, table_parquet: bytes, manifest: dict[str, Any]
    ) -> StoredRelease:
        """Store the release for a reserved charge; files may be published only after this.

        Raises ReleaseConflict if another run committed the same charge first (two runs resumed
        one reservation): publish `exc.stored` then, never this run's table.
        """
        if reservation.status == "committed":
            raise LedgerError(
                f"release {reservation.release_id!r} is already stored; return "
                "Ledger.stored_release(release_id) instead of committing again"
            )
        try:
            manifest_json = json.dumps(manifest, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise LedgerError(
                f"manifest of {reservation.release_id!r} is not JSON: {exc}"
            ) from None
        at = _now()
        with self._tx() as conn:
            row = conn.execute(
                select(charges)
                .where(charges.c.charge_id == reservation.charge_id)
                .with_for_update()
            ).one_or_none()
            if row is None or row.release_id != reservation.release_id:
                raise LedgerError(
                    f"no reservation {reservation.charge_id} for release "
                    f"{reservation.release_id!r} in ledger {self.display_url}; call reserve first"
                )
            if row.status == "committed":
                raise ReleaseConflict(
                    reservation.release_id,
                    self._stored(conn, reservation.charge_id),
                )
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
                .values(status="committed", committed_at=at)
            )
            self._event(
                conn,
                "committed",
                row.scope,
                release_id=row.release_id,
                period=row.period,
                epsilon=Fraction(row.epsilon),
                charge_id=row.charge_id,
                status="committed",
                run_id=reservation.run_id,
            )
        return StoredRelease(
            row.release_id, row.charge_id, bytes(table_parquet), json.loads(manifest_json), at
        )

    def _stored(self, conn: Connection, charge_id: int) -> StoredRelease:
        row = conn.execute(select(releases).where(releases.c.charge_id == charge_id)).one()
        return StoredRelease(
            row.release_id,
            row.charge_id,
            bytes(row.table_parquet),
            json.loads(row.manifest),
            _aware(row.committed_at),
        )

    def stored_release(self, release_id: str) -> StoredRelease | None:
        """The latest committed release with this id (re-releases supersede), or None."""
        with self._tx() as conn:
            charge_id = conn.execute(
                select(func.max(releases.c.charge_id)).where(releases.c.release_id == release_id)
            ).scalar()
            return None if charge_id is None else self._stored(conn, charge_id)

    # -- reporting -------------------------------------------------------------------------

    def status(self, scope: str | None = None) -> list[ScopeStatus]:
        """Cap, spent and remaining per scope; open reservations count as spent (fail safe)."""
        with self._tx() as conn:
            query = select(scopes).order_by(scopes.c.name)
            if scope is not None:
                query = query.where(scopes.c.name == scope)
            rows = conn.execute(query).all()
            if scope is not None and not rows:
                raise LedgerError(f"unknown budget scope {scope!r} in ledger {self.display_url}")
            charge_query = select(
                charges.c.scope, charges.c.period, charges.c.epsilon, charges.c.status
            )
            if scope is not None:
                charge_query = charge_query.where(charges.c.scope == scope)
            charge_rows = conn.execute(charge_query).all()
        result = []
        for row in rows:
            periods: dict[str | None, Fraction] = {}
            done = pending = 0
            for c in charge_rows:
                if c.scope == row.name:
                    periods[c.period] = periods.get(c.period, Fraction(0)) + Fraction(c.epsilon)
                    done += c.status == "committed"
                    pending += c.status == "reserved"
            total = sum(periods.values(), Fraction(0))
            spent = (
                max(periods.values(), default=Fraction(0))
                if row.composition == "parallel"
                else total
            )
            cap = Fraction(row.cap)
            result.append(
                ScopeStatus(
                    name=row.name,
                    cap=cap,
                    spent=spent,
                    remaining=max(cap - spent, Fraction(0)),
                    composition=row.composition,
                    periods=dict(
                        sorted(periods.items(), key=lambda kv: "" if kv[0] is None else kv[0])
                    ),
                    releases=done,
                    open_reservations=pending,
                )
            )
        return result

    def history(self, scope: str | None = None) -> list[LedgerEvent]:
        """Every event, oldest first (append-only: nothing is ever updated or deleted)."""
        with self._tx() as conn:
            query = select(events).order_by(events.c.event_id)
            if scope is not None:
                query = query.where(events.c.scope == scope)
            rows = conn.execute(query).all()
        return [
            LedgerEvent(
                event_id=r.event_id,
                at=_aware(r.at),
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
            )
            for r in rows
        ]

    def export(self, scope: str | None = None, *, include_tables: bool = False) -> dict[str, Any]:
        """A JSON-serialisable dump for audits and backups.

        Tables are left out by default (they can be large, and their sha256 lets an auditor match
        published files); `include_tables=True` adds them base64-encoded.
        """
        statuses = self.status(scope)
        with self._tx() as conn:
            charge_q = select(charges).order_by(charges.c.charge_id)
            release_q = select(releases).order_by(releases.c.charge_id)
            if scope is not None:
                charge_q = charge_q.where(charges.c.scope == scope)
                release_q = release_q.where(
                    releases.c.charge_id.in_(
                        select(charges.c.charge_id).where(charges.c.scope == scope)
                    )
                )
            charge_rows = conn.execute(charge_q).all()
            release_rows = conn.execute(release_q).all()
        return {
            "format": "dprelease-ledger-export/1",
            "schema_version": self.schema_version,
            "ledger": self.display_url,
            "exported_at": _now().isoformat(),
            "scopes": [s.to_dict() for s in statuses],
            "charges": [
                {
                    "charge_id": c.charge_id,
                    "release_id": c.release_id,
                    "scope": c.scope,
                    "period": c.period,
                    "epsilon": float(Fraction(c.epsilon)),
                    "epsilon_exact": c.epsilon,
                    "kind": c.kind,
                    "status": c.status,
                    "run_id": c.run_id,
                    "reserved_at": _aware(c.reserved_at).isoformat(),
                    "committed_at": c.committed_at and _aware(c.committed_at).isoformat(),
                }
                for c in charge_rows
            ],
            "releases": [
                {
                    "charge_id": r.charge_id,
                    "release_id": r.release_id,
                    "committed_at": _aware(r.committed_at).isoformat(),
                    "table_sha256": r.table_sha256,
                    "table_bytes": len(r.table_parquet),
                    "manifest": json.loads(r.manifest),
                    **(
                        {"table_parquet_base64": base64.b64encode(r.table_parquet).decode()}
                        if include_tables
                        else {}
                    ),
                }
                for r in release_rows
            ],
            "events": [e.to_dict() for e in self.history(scope)],
        }
