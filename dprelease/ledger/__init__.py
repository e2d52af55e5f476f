"""The persistent privacy-budget ledger: every charge against a scope's cap, and every release.

Why it exists: DP guarantees compose across releases about the same people, so the budget must be
tracked across scheduled runs, UI re-runs and backfills, i.e. outside any one process. `Ledger` is
the one entry point; the modules behind it each do one job:

* `records`: what callers get back; `identity`: the release slot (`make_release_id`);
* `database`: URLs, engines, transactions and locks; `schema` and `migrations`: the tables;
* `scopes`: caps and compositions; `spending`: what a scope has spent (the one definition);
* `protocol`: reserve → commit, and void; `reports`: status, history, export, stored releases.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dprelease.errors import LedgerError, LedgerNotFound
from dprelease.ledger import deltas, protocol, reports, scopes
from dprelease.ledger.database import (
    DEFAULT_LEDGER_PATH,
    LEDGER_URL_ENV,
    Database,
    OpenMode,
    resolve_ledger_url,
)
from dprelease.ledger.identity import make_release_id, scope_name_problem
from dprelease.ledger.migrations import LATEST, MIGRATIONS, check_supported, installed_version
from dprelease.ledger.migrations import migrate as _migrate
from dprelease.ledger.records import (
    ChargeStatus,
    Composition,
    EventKind,
    LedgerEvent,
    ReleaseConflict,
    Reservation,
    ReservationStatus,
    ScopeStatus,
    ScopeTerms,
    StoredRelease,
    Voided,
)
from dprelease.ledger.scopes import exact_epsilon, terms_conflict
from dprelease.loss import Amount, Measure

if TYPE_CHECKING:
    from dprelease.change import PrivacyUnit, ProtectedChange

__all__ = [
    "DEFAULT_LEDGER_PATH",
    "LEDGER_URL_ENV",
    "MIGRATIONS",
    "ChargeStatus",
    "Composition",
    "EventKind",
    "Ledger",
    "LedgerEvent",
    "ReleaseConflict",
    "OpenMode",
    "Reservation",
    "ReservationStatus",
    "ScopeStatus",
    "ScopeTerms",
    "StoredRelease",
    "Voided",
    "exact_epsilon",
    "make_release_id",
    "resolve_ledger_url",
    "scope_name_problem",
    "terms_conflict",
]


class Ledger:
    """A connection to one ledger database (SQLite file or PostgreSQL).

    `mode` says what opening may do: "create" (default; the release path) opens or creates the
    ledger and upgrades its schema; "existing" does the same but refuses (LedgerNotFound) when
    there is no ledger yet; "read" never writes, not even a schema upgrade.
    """

    created: bool  # this open created the schema: a new, empty ledger
    schema_version: int
    upgraded_from: int  # the schema version found (equal to schema_version if none was applied)

    def __init__(
        self,
        url: str | Path | None = None,
        *,
        default_path: str | Path = DEFAULT_LEDGER_PATH,
        mode: OpenMode = "create",
    ) -> None:
        self._db = Database(resolve_ledger_url(url, default_path), mode)
        self.url = self._db.url
        self.display_url = self._db.display_url
        with self._db.tx() as conn:
            if mode == "read":
                found = installed_version(conn)
            else:
                self._db.serialise_creators(conn)  # concurrent first opens migrate once
                found = installed_version(conn)
                if found or mode == "create":
                    found = _migrate(conn, self.display_url)
        if found == 0 and mode != "create":
            raise LedgerNotFound(
                f"{self.display_url} holds no dprelease ledger; nothing was created. Check "
                "--ledger or $DPRELEASE_LEDGER_URL (a release creates a new ledger)"
            )
        check_supported(found, self.display_url)
        if mode == "read" and found < LATEST:
            raise LedgerError(
                f"ledger {self.display_url} has schema version {found}; this dprelease reads "
                f"version {LATEST}. Upgrade it first: `dprelease ledger upgrade` (a release or "
                "set-cap also upgrades it)"
            )
        self.created = found == 0
        self.upgraded_from = found
        self.schema_version = found if mode == "read" else LATEST
        self._db.warn_if_readable_by_others()

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- scopes --------------------------------------------------------------------------

    def ensure_scope(
        self,
        name: str,
        cap: Amount,
        composition: Composition = "sequential",
        *,
        measure: Measure = Measure.PURE,
        delta: float | None = None,
        neighbours: ProtectedChange | None = None,
        unit: PrivacyUnit | None = None,
        period_column: str | None = None,
    ) -> ScopeStatus:
        """The scope's status, creating it with `cap` (ε for a pure scope, ρ for a zcdp one,
        read at `delta`) and these terms (`ScopeTerms`) if it does not exist. A release creates
        its scope itself, with its first charge (`reserve`'s `new_scope_cap`).

        An existing scope keeps the cap the ledger has (the one source of truth: change it with
        `set_cap`); the terms given must be its own (else CompositionMismatch, MeasureMismatch,
        NeighboursMismatch or PrivacyUnitMismatch); a term left None is not checked, and a scope
        made without it keeps it open until a charge states it.
        """
        terms = ScopeTerms(composition, measure, delta, neighbours, unit, period_column)
        with self._db.tx() as conn:
            scopes.ensure_scope(self._db, conn, name, cap, terms)
            return reports.status(conn, self.display_url, name)[0]

    def set_cap(self, name: str, cap: Amount, *, reason: str | None = None) -> ScopeStatus:
        """Change a scope's cap on purpose; the old and new caps go into the history."""
        with self._db.tx() as conn:
            scopes.set_cap(self._db, conn, name, cap, reason)
            return reports.status(conn, self.display_url, name)[0]

    # -- the protocol --------------------------------------------------------------------

    def reserve(
        self,
        release_id: str,
        scope: str,
        period: str | None,
        epsilon: Amount,
        *,
        spec_hash: str,
        terms: ScopeTerms | None = None,
        run_id: str | None = None,
        force_new: bool = False,
        max_cap: Fraction | None = None,
        new_scope_cap: Amount | None = None,
        selection_delta: Fraction | None = None,
        selection_delta_budget: Fraction | None = None,
    ) -> Reservation:
        """Charge `epsilon` (in the scope's measure) for this slot, resume its open reservation,
        or return it as stored.

        See `Reservation` for the three outcomes. `terms` are the release's (`ScopeTerms`): they
        must be the scope's. A scope that does not exist is made with `new_scope_cap` and
        `terms` together with its first charge, after every check (UnknownScope without a cap).
        No `terms`: the defaults (sequential, pure), stating no neighbours nor unit.
        Raises CompositionMismatch, MeasureMismatch, NeighboursMismatch, PrivacyUnitMismatch,
        SpecChanged, ReservationMismatch, CapAboveProfile (ledger cap above `max_cap`, the
        profile's) or BudgetExhausted; each leaves the ledger unchanged. `selection_delta` is
        the δ the release's key selections spend, against the scope's selection δ budget for
        life (`deltas`; `selection_delta_budget` states it when the scope has none yet).
        """
        with self._db.tx() as conn:
            return protocol.reserve(
                self._db,
                conn,
                release_id,
                scope,
                period,
                epsilon,
                spec_hash=spec_hash,
                terms=terms or ScopeTerms(),
                run_id=run_id,
                force_new=force_new,
                max_cap=max_cap,
                new_scope_cap=new_scope_cap,
                selection_delta=selection_delta,
                selection_delta_budget=selection_delta_budget,
            )

    def commit(
        self,
        reservation: Reservation,
        table_parquet: bytes,
        manifest: dict[str, Any],
        *,
        input_fingerprint: str | None = None,
    ) -> StoredRelease:
        """Store the release of a reserved or resumed charge; publish files only after this.

        `input_fingerprint` (private: never exported, published or logged) is stored with the
        charge, so a later run of the slot can tell the operator that its input changed. Raises
        ReleaseConflict if another run committed the same charge first: publish `exc.stored`
        then, never this run's table.
        """
        if reservation.status == "committed":
            raise LedgerError(
                f"release {reservation.release_id!r} is already stored; publish "
                "Ledger.stored_release(release_id) instead of committing again"
            )
        try:
            manifest_json = json.dumps(manifest, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise LedgerError(
                f"manifest of {reservation.release_id!r} is not JSON: {exc}"
            ) from None
        with self._db.tx() as conn:
            return protocol.commit(
                self._db, conn, reservation, table_parquet, manifest_json, input_fingerprint
            )

    def input_changed(self, reservation: Reservation, input_fingerprint: str) -> bool | None:
        """Whether this input differs from the one the reservation's stored release was made
        from (None: unknown). Private, for the operator channel only; reads, never writes."""
        with self._db.tx() as conn:
            return protocol.input_changed(conn, reservation.charge_id, input_fingerprint)

    def seal(self, reservation: Reservation, detail: str) -> str:
        """Mark an open reservation whose noisy output leaves before commit (a consortium's
        sum goes to its key holder): it can no longer be voided. Returns the detail of the
        slot's seal, the first one if it was sealed already (the caller compares)."""
        with self._db.tx() as conn:
            return protocol.seal(conn, reservation, detail)

    def void(self, release_id: str, *, reason: str) -> Voided:
        """End the slot's open reservation(s), freeing their ε; recorded with who and why.

        Only open reservations: a committed release can never be voided (LedgerError).
        """
        with self._db.tx() as conn:
            return protocol.void(conn, release_id, reason)

    # -- reading -------------------------------------------------------------------------

    def stored_copy(self, reservation: Reservation) -> StoredRelease:
        """The stored release a "committed" reservation returned (exactly that charge's)."""
        if reservation.status != "committed":
            raise LedgerError(
                f"release {reservation.release_id!r} is {reservation.status}, not stored yet; "
                "release it and commit"
            )
        with self._db.tx() as conn:
            return reports.load_stored(conn, reservation.charge_id)

    def stored_release(self, release_id: str) -> StoredRelease | None:
        """The latest committed release of this slot (re-releases supersede), or None."""
        with self._db.tx() as conn:
            return reports.stored_release(conn, release_id)

    def status(self, scope: str | None = None) -> list[ScopeStatus]:
        """Cap, spent and remaining per scope (UnknownScope for a named scope that is absent)."""
        with self._db.tx() as conn:
            return reports.status(conn, self.display_url, scope)

    def selection_delta(self, scope: str) -> Fraction | None:
        """The scope's key selection δ budget, kept for life (None: none yet, or no scope)."""
        with self._db.tx() as conn:
            return deltas.scope_delta_budget(conn, scope)

    def history(self, scope: str | None = None) -> list[LedgerEvent]:
        """Every event, oldest first (append-only: nothing is ever updated or deleted)."""
        with self._db.tx() as conn:
            return reports.history(conn, scope)

    def export(self, scope: str | None = None, *, include_tables: bool = False) -> dict[str, Any]:
        """A JSON-serialisable dump for audits and backups, read as one snapshot."""
        with self._db.tx() as conn:
            return reports.export(
                conn, self.display_url, self.schema_version, scope, include_tables=include_tables
            )
