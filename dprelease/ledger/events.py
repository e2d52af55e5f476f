"""Appending to the history: every change to the ledger says when, who, and what."""

from __future__ import annotations

import getpass
import os
import socket
from fractions import Fraction

from sqlalchemy import Connection, insert

from dprelease.ledger.database import now
from dprelease.ledger.records import EventKind
from dprelease.ledger.schema import events


def actor() -> str:
    """Who is acting: ``user@host pid N`` (the history's answer to "who did this")."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (some containers)
        user = f"uid{os.getuid()}"
    return f"{user}@{socket.gethostname()} pid {os.getpid()}"


def record_event(
    conn: Connection,
    kind: EventKind,
    scope: str,
    *,
    release_id: str | None = None,
    period: str | None = None,
    epsilon: Fraction | None = None,
    charge_id: int | None = None,
    status: str | None = None,
    run_id: str | None = None,
    detail: str | None = None,
) -> None:
    """Append one event in the caller's transaction (it commits or rolls back with the change)."""
    conn.execute(
        insert(events).values(
            at=now(),
            kind=kind,
            scope=scope,
            release_id=release_id,
            period=period,
            epsilon=None if epsilon is None else str(epsilon),
            charge_id=charge_id,
            status=status,
            run_id=run_id,
            actor=actor(),
            detail=detail,
        )
    )
