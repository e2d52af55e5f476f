"""Where the ledger lives and how each transaction runs, on SQLite and PostgreSQL.

Every ledger operation is one transaction, safe under concurrent processes:

* SQLite: a writer's transaction starts with ``BEGIN IMMEDIATE`` (the database write lock), so a
  budget check and its insert cannot interleave with another writer; a busy timeout makes
  waiting writers queue instead of failing. A read-only open uses a ``mode=ro`` connection (it
  cannot create or change the file) and plain ``BEGIN`` for a consistent snapshot.
* PostgreSQL: writers lock the scope row (``SELECT ... FOR UPDATE``); creating the schema or a
  scope, which has no row to lock yet, takes a transaction-level advisory lock. A read-only open
  runs every transaction ``READ ONLY``.

A SQLite ledger is a regular file, created readable by its owner only (its journal files take
its permissions); an existing one that others can read gets a warning on the operator channel.

Database failures become `LedgerUnavailable` with one line and no driver traceback: the caller
fails closed, nothing charged or published.
"""

from __future__ import annotations

import os
import shlex
import sqlite3
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Connection, Engine, Row, create_engine, event, func, select
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

from dprelease import operator
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
#: A new SQLite ledger is readable by its owner only: it holds each release's private input
#: fingerprint, with which a reader can test guesses of the whole input (PRIVACY.md).
PRIVATE_FILE_MODE = 0o600


def resolve_ledger_url(
    url: str | Path | None = None, default_path: str | Path = DEFAULT_LEDGER_PATH
) -> str:
    """The ledger to use: explicit `url` > env DPRELEASE_LEDGER_URL > SQLite file at default_path.

    A value without ``://`` (or a `pathlib.Path`) is a SQLite file path, made absolute. Nothing
    is created here.
    """
    chosen = os.fspath(url) if url else os.environ.get(LEDGER_URL_ENV)
    if chosen and "://" in chosen:
        return chosen
    path = (Path(chosen) if chosen else Path(default_path)).expanduser().resolve()
    return f"sqlite:///{path}"


def _require_regular_file(path: Path) -> None:
    """A SQLite ledger is a regular file: a directory (`--ledger /tmp`) or a device, FIFO or
    socket is refused with LedgerError naming it, before anything is created or opened."""
    if not path.exists() or path.is_file():
        return
    kind = "a directory" if path.is_dir() else "not a regular file (a device, FIFO or socket)"
    raise LedgerError(
        f"ledger path {path} is {kind}; give the path of a SQLite ledger file (such as "
        f"{path / 'ledger.sqlite' if path.is_dir() else DEFAULT_LEDGER_PATH}) or a database URL"
    )


def _create_private_file(path: Path) -> None:
    """Create an empty ledger file readable by its owner only, unless it exists.

    SQLite would create it with the umask's permissions (usually 0644: readable by everyone),
    and it gives its journal files (-journal, -wal, -shm) the database file's permissions; so
    the file is made here first, 0600 whatever the umask, and SQLite opens it as an empty
    database. Concurrent creators race on O_EXCL: exactly one creates it.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LedgerError(
            f"cannot create a ledger at {path}: its directory {path.parent} cannot be made "
            f"({exc.strerror}); nothing was created"
        ) from None
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    except FileExistsError:
        return
    except OSError as exc:
        raise LedgerError(f"cannot create a ledger at {path} ({exc.strerror})") from None
    try:
        os.fchmod(descriptor, PRIVATE_FILE_MODE)
    finally:
        os.close(descriptor)


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
        self.sqlite_path: Path | None = None  # the file of a SQLite ledger
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
        if path is not None:
            _require_regular_file(path)
        if mode != "create" and (path is None or not path.is_file()):
            raise LedgerNotFound(
                f"no ledger at {path or 'an in-memory database'}; nothing was created. Check "
                f"--ledger or ${LEDGER_URL_ENV} (a release creates a new ledger)"
            )
        self.sqlite_path = path
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

        if mode == "create" and path is not None:  # the engine is usable: only now make a file
            _create_private_file(path)
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

    def warn_if_readable_by_others(self) -> None:
        """Tell the operator that the SQLite ledger file is readable by its group or by everyone,
        and how to make it private (it is not changed: its owner decides). Called once per open,
        after the file proved to be a ledger."""
        if self.sqlite_path is None:
            return
        try:
            mode = stat.S_IMODE(self.sqlite_path.stat().st_mode)
        except OSError:  # it vanished since: the next transaction will say so
            return
        bits = (("its group", stat.S_IRGRP), ("others", stat.S_IROTH))
        readers = [who for who, bit in bits if mode & bit]
        if readers:
            operator.warn(
                f"ledger file {self.sqlite_path} is readable by {' and '.join(readers)} (mode "
                f"{mode:04o}); it holds each release's input fingerprint, with which a reader can "
                "test guesses of the whole input (PRIVACY.md). Make it private: chmod 600 "
                f"{shlex.quote(str(self.sqlite_path))}"
            )

    def close(self) -> None:
        self._engine.dispose()
