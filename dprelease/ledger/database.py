"""Where the ledger lives and how each transaction runs, on SQLite and PostgreSQL.

Every ledger operation is one transaction, safe under concurrent processes:

* SQLite: a writer's transaction starts with ``BEGIN IMMEDIATE`` (the database write lock), so a
  budget check and its insert cannot interleave with another writer; a busy timeout makes
  waiting writers queue instead of failing. A read-only open uses a ``mode=ro`` connection (it
  cannot create or change the file) and plain ``BEGIN`` for a consistent snapshot.
* PostgreSQL: writers lock the scope row (``SELECT ... FOR UPDATE``); creating the schema or a
  scope, which has no row to lock yet, takes a transaction-level advisory lock. A read-only open
  runs every transaction ``READ ONLY``.

Database failures become `LedgerUnavailable` with one line and no driver traceback: the caller
fails closed, nothing charged or published.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Connection, Engine, Row, create_engine, event, func, select
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

from dprelease.errors import LedgerError, LedgerNotFound, LedgerUnavailable, UnknownScope
from dprelease.ledger.schema import scopes

#: "create": open or create (the release path); "existing": must exist, may write (set-cap,
#: void, upgrade); "read": must exist, never writes (status, history, export).
OpenMode = Literal["create", "existing", "read"]

LEDGER_URL_ENV = "DPRELEASE_LEDGER_URL"
DEFAULT_LEDGER_PATH = ".dprelease/ledger.sqlite"
SQLITE_BUSY_TIMEOUT_S = 60.0
PG_CONNECT_TIMEOUT_S = 10
_PG_CREATE_LOCK = 0x64707265_6C656467  # "dpreledg": serialises creating the schema or a scope


def resolve_ledger_url(
    url: str | None = None, default_path: str | Path = DEFAULT_LEDGER_PATH
) -> str:
    """The ledger to use: explicit `url` > env DPRELEASE_LEDGER_URL > SQLite file at default_path.

    A value without ``://`` is a SQLite file path, made absolute. Nothing is created here.
    """
    chosen = url or os.environ.get(LEDGER_URL_ENV)
    if chosen and "://" in chosen:
        return chosen
    path = (Path(chosen) if chosen else Path(default_path)).expanduser().resolve()
    return f"sqlite:///{path}"


def now() -> datetime:
    return datetime.now(UTC)


def aware(value: datetime) -> datetime:
    """SQLite hands back naive datetimes; everything stored is UTC."""
    return value if value.tzinfo else value.replace(tzinfo=UTC)


class Database:
    """One ledger database: its engine, its transactions and its locks."""

    def __init__(self, url: str, mode: OpenMode) -> None:
        self.url = url
        self.read_only = mode == "read"
        try:
            parsed = make_url(url)
            self.display_url = parsed.render_as_string(hide_password=True)
            backend = parsed.get_backend_name()
            if backend == "sqlite":
                self._engine = self._sqlite_engine(parsed, mode)
            elif backend == "postgresql":
                self._engine = create_engine(
                    url,
                    connect_args={"connect_timeout": PG_CONNECT_TIMEOUT_S},
                    pool_pre_ping=True,
                    execution_options={"postgresql_readonly": self.read_only},
                )
            else:
                raise ValueError(f"unsupported database {backend!r} (SQLite and PostgreSQL are)")
        except (ArgumentError, NoSuchModuleError, ValueError) as exc:
            raise LedgerError(
                f"cannot use ledger URL {url!r}: {exc}. Use a SQLite path, "
                "sqlite:///path/to/ledger.sqlite or postgresql+psycopg://user:pw@host/db"
            ) from None
        self.is_pg = self._engine.dialect.name == "postgresql"

    def _sqlite_engine(self, url: URL, mode: OpenMode) -> Engine:
        path = Path(url.database) if url.database not in (None, "", ":memory:") else None
        if mode == "create" and path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        elif mode != "create" and (path is None or not path.is_file()):
            raise LedgerNotFound(
                f"no ledger at {path or 'an in-memory database'}; nothing was created. Check "
                f"--ledger or ${LEDGER_URL_ENV} (a release creates a new ledger)"
            )
        if self.read_only and path is not None:  # (no path in read mode was refused above)
            uri = f"{path.resolve().as_uri()}?mode=ro"
            engine = create_engine(
                "sqlite://",
                creator=lambda: sqlite3.connect(uri, uri=True, timeout=SQLITE_BUSY_TIMEOUT_S),
            )
        else:
            engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})
        begin = "BEGIN" if self.read_only else "BEGIN IMMEDIATE"

        # pysqlite opens transactions lazily and only for DML; take over (documented SQLAlchemy
        # recipe) so a writer's transaction holds the write lock from its first statement.
        @event.listens_for(engine, "connect")
        def _connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None
            cursor = dbapi_conn.cursor()
            cursor.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
            cursor.execute("PRAGMA foreign_keys = ON")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            conn.exec_driver_sql(begin)

        return engine

    @contextmanager
    def tx(self) -> Iterator[Connection]:
        """One transaction; database failures become LedgerUnavailable (fail closed)."""
        try:
            with self._engine.begin() as conn:
                yield conn
        except SQLAlchemyError as exc:
            orig = getattr(exc, "orig", None) or exc
            text = str(orig).strip()
            reason = text.splitlines()[0] if text else type(orig).__name__
            raise LedgerUnavailable(
                f"ledger {self.display_url} is unreachable or corrupt ({reason}); nothing was "
                "charged or published. Check the ledger URL/server, or restore the ledger file "
                "from a backup."
            ) from None

    def serialise_creators(self, conn: Connection) -> None:
        """Queue concurrent creators of the schema or of a scope (no row to lock yet).

        SQLite needs nothing: BEGIN IMMEDIATE already holds the database write lock.
        """
        if self.is_pg:
            conn.execute(select(func.pg_advisory_xact_lock(_PG_CREATE_LOCK)))

    def locked_scope(self, conn: Connection, name: str) -> Row[Any]:
        """The scope row, locked until the transaction ends; UnknownScope if there is none."""
        row = conn.execute(
            select(scopes).where(scopes.c.name == name).with_for_update()
        ).one_or_none()
        if row is None:
            raise UnknownScope(
                f"unknown budget scope {name!r} in ledger {self.display_url}; create it first "
                "(`dprelease release --cap` or --config; Ledger.ensure_scope)"
            )
        return row

    def close(self) -> None:
        self._engine.dispose()
