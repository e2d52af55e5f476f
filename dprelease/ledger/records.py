"""What the ledger hands back to callers: plain frozen records, no database handles."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from typing import Any, Literal

from dprelease.change import PrivacyUnit, ProtectedChange
from dprelease.errors import LedgerError
from dprelease.loss import Measure, amount_text, epsilon_of_zcdp, loss_text

Composition = Literal["sequential", "parallel"]
#: A charge's life: "reserved" -> "committed", or "reserved" -> "voided" (never both).
ChargeStatus = Literal["reserved", "committed", "voided"]
#: What `Ledger.reserve` did: a new charge, an open one picked up again, or the stored release.
ReservationStatus = Literal["reserved", "resumed", "committed"]
EventKind = Literal[
    "scope_created",  # ensure_scope made a new scope
    "cap_changed",  # set_cap changed a cap on purpose
    "reserved",  # a new charge (first release of this slot)
    "re-reserved",  # a new charge for a slot already released (force_new)
    "resumed",  # an open reservation taken over (its run dead or still running): no charge
    "committed",  # the release was stored
    "reused",  # a re-run served from the store: no charge
    "voided",  # an open reservation ended by an operator: its budget is free again
    "sealed",  # a reservation whose output left before commit (a consortium's sum): never voided
    "migrated",  # a schema upgrade rewrote this scope's records (detail says how)
    "terms_fixed",  # a charge fixed a term the scope kept none of yet (detail says which)
]


@dataclass(frozen=True)
class ScopeTerms:
    """What a scope's guarantee rests on, fixed when the scope is made and kept for life.

    * `composition`: sequential (every charge adds up) or parallel (each period has the full cap,
      sound only because a period's people are disjoint from another's);
    * `measure` and `delta`: the unit of its amounts (ε, or ρ read at δ);
    * `neighbours`: the protected change its cap was chosen for; the same ε is another odds
      factor under the other (e^{2ε} or e^{ε} for a change of one value);
    * `unit`: who one neighbouring change is about (each row, or the rows of one column value);
    * `period_column`: for parallel composition, the date column whose months partition the
      people (months cut by another column are another partition: a person could be in the
      January of one and the February of the other, each with the full cap).

    A release states them all. A term left None is not stated: not checked, and a scope made
    without it (by `Ledger.ensure_scope`, or an earlier ledger whose records do not say) keeps
    it open until a charge states it, which fixes it (a "terms_fixed" event)."""

    composition: Composition = "sequential"
    measure: Measure = Measure.PURE
    delta: float | None = None
    neighbours: ProtectedChange | None = None
    unit: PrivacyUnit | None = None
    period_column: str | None = None


@dataclass(frozen=True)
class Reservation:
    """The outcome of `Ledger.reserve`; `status` says whether it charged.

    * "reserved": a new charge of `epsilon`; release, then `Ledger.commit`.
    * "resumed": the slot's open reservation, of the same spec and ε, taken over with no second
      charge; release, then commit. Its run may have died or may still be drawing (the ledger
      cannot tell): the first commit is stored, a later one gets ReleaseConflict.
    * "committed": the slot is already released; nothing charged. Publish
      `Ledger.stored_release(release_id)`; `epsilon` is the stored ε, `requested_epsilon` what
      this run asked for.
    """

    release_id: str
    charge_id: int
    status: ReservationStatus
    scope: str
    period: str | None
    epsilon: Fraction
    requested_epsilon: Fraction
    spec_hash: str | None  # recorded with the charge; None for charges from schema version 1
    run_id: str | None
    rerelease: bool = False
    committed_at: datetime | None = None

    @property
    def charged(self) -> bool:
        """True when this call charged the scope (only a new reservation does)."""
        return self.status == "reserved"

    @property
    def epsilon_differs(self) -> bool:
        """The charge's ε is not what this run asked for (e.g. the cap changed since)."""
        return self.epsilon != self.requested_epsilon


@dataclass(frozen=True)
class StoredRelease:
    """A committed release exactly as stored: the bytes every publication is written from."""

    release_id: str
    charge_id: int
    epsilon: Fraction
    spec_hash: str | None
    table_parquet: bytes = field(repr=False)
    manifest: dict[str, Any] = field(repr=False)
    committed_at: datetime


class ReleaseConflict(LedgerError):
    """Another run committed the same reservation first; `stored` is the release to publish."""

    def __init__(self, release_id: str, stored: StoredRelease) -> None:
        self.release_id = release_id
        self.stored = stored
        super().__init__(
            f"release {release_id!r} was committed by another run while this one was running; "
            "publish the stored release (Ledger.stored_release), not this run's table"
        )


@dataclass(frozen=True)
class Voided:
    """What `Ledger.void` ended: the open charges of one slot and the budget they gave back."""

    release_id: str
    scope: str
    period: str | None
    charge_ids: tuple[int, ...]
    epsilon: Fraction  # returned to the scope


@dataclass(frozen=True)
class ScopeStatus:
    """Budget of one scope, in its measure's unit (ε for `pure`, ρ for `zcdp`). For parallel
    scopes `spent`/`remaining` are the worst period's."""

    name: str
    cap: Fraction
    spent: Fraction
    remaining: Fraction
    composition: Composition
    measure: Measure = Measure.PURE
    delta: float | None = None  # zcdp: the δ its odds statement is read at
    periods: dict[str | None, Fraction] = field(default_factory=dict)  # spent per period
    releases: int = 0  # committed charges
    open_reservations: int = 0  # reserved, never committed nor voided (counted as spent)
    neighbours: ProtectedChange | None = None  # None: not fixed yet (see ScopeTerms)
    privacy_unit: PrivacyUnit | None = None  # None: not fixed yet
    period_column: str | None = None  # parallel: the column whose months are its periods
    #: key selection's δ budget, kept for life (None: no selecting release yet, none stated)
    selection_delta: Fraction | None = None
    #: the selection δ spent (parallel scopes: the worst period's), open reservations included
    selection_delta_spent: Fraction = Fraction(0)

    @property
    def selection_delta_left(self) -> Fraction | None:
        """What stays of the selection δ budget (None without one)."""
        if self.selection_delta is None:
            return None
        return max(self.selection_delta - self.selection_delta_spent, Fraction(0))

    @property
    def unit(self) -> str:
        """The symbol of the amounts: ε or ρ."""
        return self.measure.symbol

    def __repr__(self) -> str:
        """The scope in words, its amounts named by their measure (a ρ is never shown as a bare
        number that reads like an ε)."""
        kept: list[str] = [self.composition]
        if self.neighbours is not None:
            kept.append(f"{self.neighbours.value} neighbours")
        if self.privacy_unit is not None:
            kept.append(f"privacy unit {self.privacy_unit}")
        return (
            f"ScopeStatus({self.name!r}: cap {loss_text(self.measure, self.cap, self.delta)}, "
            f"spent {self.unit} = {amount_text(self.spent)}, left {self.unit} = "
            f"{amount_text(self.remaining)}; {', '.join(kept)})"
        )

    @property
    def terms(self) -> ScopeTerms:
        """What the scope's guarantee rests on, as the ledger keeps it."""
        return ScopeTerms(
            self.composition,
            self.measure,
            self.delta,
            self.neighbours,
            self.privacy_unit,
            self.period_column,
        )

    def epsilon_delta(self) -> float | None:
        """zcdp: the ε of (ε, δ)-DP that the spent ρ implies, ρ + 2√(ρ·log(1/δ)) (Bun &
        Steinke 2016); None for a pure scope."""
        if self.measure is not Measure.ZCDP or self.delta is None:
            return None
        return epsilon_of_zcdp(self.spent, self.delta)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "composition": self.composition,
            "measure": self.measure.value,
            "unit": self.unit,
            "delta": self.delta,
            "epsilon_delta_spent": self.epsilon_delta(),
            "neighbours": None if self.neighbours is None else self.neighbours.value,
            "privacy_unit": None
            if self.privacy_unit is None
            else {"column": self.privacy_unit.column},
            "period_column": self.period_column,
            "cap": float(self.cap),
            "spent": float(self.spent),
            "remaining": float(self.remaining),
            "cap_exact": str(self.cap),
            "spent_exact": str(self.spent),
            "remaining_exact": str(self.remaining),
            "selection_delta": _optional(self.selection_delta),
            "selection_delta_spent": float(self.selection_delta_spent),
            "selection_delta_left": _optional(self.selection_delta_left),
            "selection_delta_exact": _optional_text(self.selection_delta),
            "selection_delta_spent_exact": str(self.selection_delta_spent),
            "selection_delta_left_exact": _optional_text(self.selection_delta_left),
            "releases": self.releases,
            "open_reservations": self.open_reservations,
            "periods": {
                ("-" if p is None else p): {"spent": float(s), "spent_exact": str(s)}
                for p, s in self.periods.items()
            },
        }


@dataclass(frozen=True)
class LedgerEvent:
    """One line of the append-only history; `actor` is who did it (user@host pid). `epsilon` is
    the amount in its scope's `measure`: an ε, or a ρ in a zCDP scope."""

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
    measure: Measure = Measure.PURE

    @property
    def unit(self) -> str:
        """The symbol of the amount: ε or ρ."""
        return self.measure.symbol

    def to_dict(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "unit": self.unit,
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


def _optional(value: Fraction | None) -> float | None:
    return None if value is None else float(value)


def _optional_text(value: Fraction | None) -> str | None:
    return None if value is None else str(value)
