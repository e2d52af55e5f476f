"""What the ledger has released compared with what the public store holds, and what it has
reserved but never stored.

The ledger's append-only history lists every charge: a slot's latest commit is the release to
publish (a re-release supersedes), and each published manifest carries the charge id it was
written from; a charge reserved (or resumed) and neither committed nor voided is an open
reservation, counted as spent until a run of its slot resumes it or an operator voids it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from fractions import Fraction

from dprelease.ledger import Ledger, make_release_id
from dprelease.spec import ResolvedSpec
from pipelines.release_specs import publish_of
from pipelines.resources import PublicStore


@dataclass(frozen=True)
class Pending:
    """A release stored in the ledger whose files are not (or not this version) published."""

    release: str
    scope: str
    period: str | None
    release_id: str
    charge_id: int


def published_charge(public: PublicStore, release: str, period: str | None) -> int | None:
    """The ledger charge id of the release whose files are in the public store, if any."""
    manifest = public.release_dir(release, period) / "manifest.json"
    try:
        return int(json.loads(manifest.read_text())["ledger"]["charge_id"])
    except (FileNotFoundError, KeyError, TypeError, ValueError):
        return None


def unpublished(
    book: Ledger,
    releases: list[ResolvedSpec],
    public: PublicStore,
    *,
    settle_minutes: int = 0,
) -> list[Pending]:
    """Releases whose latest commit (at least `settle_minutes` old) is not what is published."""
    settled = datetime.now(UTC) - timedelta(minutes=settle_minutes)
    pending: list[Pending] = []
    for release in releases:
        scope = publish_of(release).scope
        latest = {  # history is oldest first: the last commit of a slot wins
            event.period: (event.release_id, event.charge_id, event.at)
            for event in book.history(scope)
            if event.kind == "committed"
            and event.release_id == make_release_id(release.spec.name, event.period)
        }
        for period, (release_id, charge_id, at) in latest.items():
            assert release_id is not None and charge_id is not None  # set on every commit
            if at <= settled and published_charge(public, release.spec.name, period) != charge_id:
                pending.append(Pending(release.spec.name, scope, period, release_id, charge_id))
    return pending


@dataclass(frozen=True)
class OpenReservation:
    """A charge reserved for a slot and neither committed nor voided: its run died (or is still
    drawing). The run that last took it (`run_id`) is the one to relaunch."""

    release_id: str
    scope: str
    period: str | None
    charge_id: int
    amount: Fraction
    run_id: str | None
    at: datetime


#: The events that open a charge or hand it to a run, and those that close it.
_TAKEN = ("reserved", "re-reserved", "resumed")
_CLOSED = ("committed", "voided")


def open_reservations(book: Ledger, scopes: list[str] | None = None) -> list[OpenReservation]:
    """Every open reservation of `scopes` (default: all), oldest first, from the history."""
    events = [e for s in scopes for e in book.history(s)] if scopes else book.history()
    found: dict[int, OpenReservation] = {}
    for event in sorted(events, key=lambda e: e.event_id):
        if event.charge_id is None or event.release_id is None:
            continue
        if event.kind in _CLOSED:
            found.pop(event.charge_id, None)
        elif event.kind in _TAKEN:
            opened = found.get(event.charge_id)
            found[event.charge_id] = OpenReservation(
                release_id=event.release_id,
                scope=event.scope,
                period=event.period,
                charge_id=event.charge_id,
                amount=opened.amount if opened else event.epsilon or Fraction(0),
                run_id=event.run_id,
                at=opened.at if opened else event.at,
            )
    return list(found.values())
