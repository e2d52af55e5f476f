"""The protected change: which two datasets differential privacy must make indistinguishable.

Every privacy statement dprelease makes is relative to it. `add_remove` ("unbounded DP") hides
whether one privacy unit is in the data at all; `substitute` ("bounded DP") hides what one unit's
rows are, the number of units being public. The choice moves three things: the sensitivity of a
grouped statistic (a substituted unit's rows may move between groups), and how a release's loss
turns into an odds statement about one person's sensitive value (changing that value is a removal
plus an addition under `add_remove`: a group of two neighbours).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ProtectedChange(StrEnum):
    """Which datasets are neighbours (the YAML's `neighbours:`)."""

    ADD_REMOVE = "add_remove"
    SUBSTITUTE = "substitute"

    @property
    def value_change_group(self) -> int:
        """k: changing one person's value is a group of k neighbouring changes (2 under
        add/remove: remove the person, add them back with the other value; 1 under substitute).
        Under ε-DP the likelihood ratio of a value change is then within e^{±kε} (Kazan & Reiter,
        Lemma 1); under ρ-zCDP the change is k²ρ-zCDP (group privacy)."""
        return 2 if self is ProtectedChange.ADD_REMOVE else 1


def choose_change(
    declared: ProtectedChange | None, configured: ProtectedChange | None
) -> ProtectedChange:
    """The spec's protected change, else the privacy configuration's, else add/remove.

    Raises ValueError when both are given and differ; callers name the field."""
    if declared is not None and configured is not None and declared is not configured:
        raise ValueError(
            f"spec says {declared.value} but the privacy configuration says {configured.value}; "
            "make them agree"
        )
    return declared or configured or ProtectedChange.ADD_REMOVE


@dataclass(frozen=True)
class PrivacyUnit:
    """Whose data one neighbouring change adds, removes or substitutes: each row on its own
    (`column` None: a spec without `privacy_unit`), or all the rows that share one value of
    `column` (a person, a household). Δ is calibrated to it, so ε bounds what a release reveals
    about one unit; a scope's spending adds up for one kind of unit only."""

    column: str | None = None

    def __str__(self) -> str:
        return "each row" if self.column is None else f"column {self.column!r}"

    @property
    def key(self) -> str:
        """The unit as the ledger keeps it: ``row``, or ``column:<name>`` (any name, unmistaken
        for a row-level unit)."""
        return "row" if self.column is None else f"column:{self.column}"

    @classmethod
    def from_key(cls, key: str) -> PrivacyUnit:
        """The unit a ledger `key` stands for (ValueError for anything else)."""
        if key == "row":
            return cls(None)
        kind, colon, column = key.partition(":")
        if kind != "column" or not colon:
            raise ValueError(f"not a privacy unit: {key!r}")
        return cls(column)
