"""Process entry points for the ledger concurrency and crash tests (importable by spawn children).

Each worker reports through its exit code so the parent needs no shared state:
0 released, 3 refused with BudgetExhausted, 4 lost a ReleaseConflict (published the stored one).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from dprelease.errors import BudgetExhausted, ReleaseConflict
from dprelease.ledger import Ledger

RELEASED, EXHAUSTED, CONFLICT = 0, 3, 4


def release_once(
    url: str, scope: str, release_id: str, period: str, epsilon: Any, barrier: Any
) -> None:
    """Open the ledger, wait for every racer, then reserve -> 'release' -> commit."""
    ledger = Ledger(url)
    barrier.wait()
    try:
        reservation = ledger.reserve(release_id, scope, period, epsilon, run_id=f"pid{os.getpid()}")
        if reservation.status != "committed":
            ledger.commit(reservation, f"table by {os.getpid()}".encode(), {"pid": os.getpid()})
    except BudgetExhausted:
        sys.exit(EXHAUSTED)
    except ReleaseConflict:
        sys.exit(CONFLICT)
    sys.exit(RELEASED)


def open_and_ensure(url: str, scope: str, barrier: Any) -> None:
    """Race to open a brand-new ledger (schema migration) and create the same scope."""
    barrier.wait()
    Ledger(url).ensure_scope(scope, 1.0)


def reserve_then_die(url: str, scope: str, release_id: str, period: str, epsilon: Any) -> None:
    """Reserve, then SIGKILL ourselves: a crash between reserve and commit."""
    Ledger(url).reserve(release_id, scope, period, epsilon, run_id="doomed")
    os.kill(os.getpid(), signal.SIGKILL)
