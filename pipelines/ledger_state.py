"""What the ledger has released compared with what the public store holds.

Both questions are answered from the ledger's append-only history (its `committed` events), so
they do not depend on how a release id is spelled, and from the charge id each published
manifest carries.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from dprelease.ledger import Ledger
from pipelines.release_specs import PipelineRelease
from pipelines.resources import PublicStore


@dataclass(frozen=True)
class Pending:
    """A release stored in the ledger whose files are not (or not this version) published."""

    release: str
    scope: str
    period: str | None
    release_id: str
    charge_id: int


@dataclass(frozen=True)
class Committed:
    release_id: str
    charge_id: int
    at: datetime


def released_periods(book: Ledger, scope: str, asset: str) -> dict[str | None, Committed]:
    """Period → the latest committed release of `asset` in `scope`."""
    latest: dict[str | None, Committed] = {}
    for event in book.history(scope):
        if event.kind == "committed" and (event.release_id or "").startswith(f"{asset}/"):
            assert event.release_id is not None and event.charge_id is not None
            latest[event.period] = Committed(event.release_id, event.charge_id, event.at)
    return latest


def published_charge(public: PublicStore, release: str, period: str | None) -> int | None:
    """The ledger charge id of the release whose files are in the public store, if any."""
    manifest = public.release_dir(release, period) / "manifest.json"
    try:
        return int(json.loads(manifest.read_text())["ledger"]["charge_id"])
    except (FileNotFoundError, KeyError, TypeError, ValueError):
        return None


def unpublished(
    book: Ledger,
    releases: list[PipelineRelease],
    public: PublicStore,
    *,
    settle_minutes: int = 0,
) -> list[Pending]:
    """Releases the ledger committed (at least `settle_minutes` ago) that are not published."""
    settled = datetime.now(UTC) - timedelta(minutes=settle_minutes)
    return [
        Pending(r.name, r.publish.scope, period, c.release_id, c.charge_id)
        for r in releases
        for period, c in released_periods(book, r.publish.scope, r.name).items()
        if c.at <= settled and published_charge(public, r.name, period) != c.charge_id
    ]
