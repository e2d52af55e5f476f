"""What the ledger has released compared with what the public store holds.

The ledger's append-only history lists every committed charge; a slot's latest one is the
release to publish (a re-release supersedes), and each published manifest carries the charge id
it was written from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

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
