"""The release slot: what makes two runs "the same release" (one charge, one stored copy)."""

from __future__ import annotations

from dprelease.errors import LedgerError

NO_PERIOD = "-"


def make_release_id(asset: str, period: str | None) -> str:
    """``asset/period`` ("-" when the release has no period): the slot a release fills.

    The spec hash is deliberately not part of it: a changed spec for a released slot must be
    noticed (SpecChanged), not silently become a new, charged release.
    """
    if not asset or asset != asset.strip() or "/" in asset:
        raise LedgerError(f"release id needs an asset name without '/' or outer spaces: {asset!r}")
    if period is not None and (not period or "/" in period or period == NO_PERIOD):
        raise LedgerError(f"release id needs a period without '/', or None: {period!r}")
    return f"{asset}/{NO_PERIOD if period is None else period}"
