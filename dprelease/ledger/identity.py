"""The ledger's keys, each with one spelling: the release slot (what makes two runs "the same
release": one charge, one stored copy) and the scope's name."""

from __future__ import annotations

import re

from dprelease.errors import LedgerError

NO_PERIOD = "-"

#: A scope's name: ASCII letters, digits, '_', '.', '-', starting with a letter or digit. A scope
#: is a budget: a second spelling of the same name (other case, spaces, Unicode look-alikes)
#: would be a second, full budget for the same people.
_SCOPE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,199}", re.ASCII)


def scope_name_problem(name: object) -> str | None:
    """Why `name` cannot name a budget scope, in words (None: it can). An empty name is not a
    way to leave the scope out: it is refused like any other name no scope can have."""
    if isinstance(name, str) and _SCOPE_NAME.fullmatch(name) is not None:
        return None
    return (
        f"scope name {name!r}: use ASCII letters, digits, '_', '.' and '-' (starting with a "
        "letter or digit, at most 200), so that one budget has one spelling"
    )


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
