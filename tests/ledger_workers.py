"""Process entry points for the ledger concurrency and crash tests (importable by spawn children).

Each worker reports through its exit code so the parent needs no shared state:
0 released, 3 refused with BudgetExhausted, 4 lost a ReleaseConflict (published the stored one),
5 found the slot already released (the stored copy, no charge), 6 refused with
ReservationMismatch (another ε holds the open reservation), 7 refused with NeighboursMismatch
(the scope was made by a release under the other neighbours).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from dprelease.change import PrivacyUnit, ProtectedChange
from dprelease.errors import BudgetExhausted, NeighboursMismatch, ReservationMismatch
from dprelease.ledger import Ledger, ReleaseConflict, ScopeTerms
from dprelease.loss import Measure

RELEASED, EXHAUSTED, CONFLICT, STORED, MISMATCH, OTHER_TERMS = 0, 3, 4, 5, 6, 7
SPEC_HASH = "h" * 64


def release_once(
    url: str,
    scope: str,
    release_id: str,
    period: str,
    epsilon: Any,
    barrier: Any,
    measure: Measure = Measure.PURE,
) -> None:
    """Open the ledger, wait for every racer, then reserve -> 'release' -> commit (`epsilon` is
    the amount in the scope's `measure`: ε, or ρ)."""
    ledger = Ledger(url)
    barrier.wait()
    try:
        reservation = ledger.reserve(
            release_id,
            scope,
            period,
            epsilon,
            spec_hash=SPEC_HASH,
            run_id=f"pid{os.getpid()}",
            terms=ScopeTerms(measure=measure, delta=None if measure is Measure.PURE else 1e-9),
        )
        if reservation.status == "committed":
            sys.exit(STORED)
        ledger.commit(reservation, f"table by {os.getpid()}".encode(), {"pid": os.getpid()})
    except BudgetExhausted:
        sys.exit(EXHAUSTED)
    except ReleaseConflict:
        sys.exit(CONFLICT)
    except ReservationMismatch:
        sys.exit(MISMATCH)
    sys.exit(RELEASED)


def open_and_ensure(url: str, scope: str, barrier: Any) -> None:
    """Race to open a brand-new ledger (schema migration) and create the same scope."""
    barrier.wait()
    Ledger(url).ensure_scope(scope, 1.0)


def reserve_then_die(url: str, scope: str, release_id: str, period: str, epsilon: Any) -> None:
    """Reserve, then SIGKILL ourselves: a crash between reserve and commit."""
    Ledger(url).reserve(release_id, scope, period, epsilon, spec_hash=SPEC_HASH, run_id="doomed")
    os.kill(os.getpid(), signal.SIGKILL)


def open_scope_by_release(
    url: str, scope: str, release_id: str, neighbours: str, cap: str, barrier: Any
) -> None:
    """Race to make a new scope with this release's first charge, under `neighbours`."""
    ledger = Ledger(url)
    terms = ScopeTerms(neighbours=ProtectedChange(neighbours), unit=PrivacyUnit("pid"))
    barrier.wait()
    try:
        ledger.reserve(
            release_id, scope, None, "1/100", spec_hash=SPEC_HASH, terms=terms, new_scope_cap=cap
        )
    except NeighboursMismatch:
        sys.exit(OTHER_TERMS)
    sys.exit(RELEASED)
