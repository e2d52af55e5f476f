"""The protected change: which two datasets differential privacy must make indistinguishable.

Every privacy statement dprelease makes is relative to it. `add_remove` ("unbounded DP") hides
whether one privacy unit is in the data at all; `substitute` ("bounded DP") hides what one unit's
rows are, the number of units being public. The choice moves three things: the sensitivity of a
grouped statistic (a substituted unit's rows may move between groups), and how a release's loss
turns into an odds statement about one person's sensitive value (changing that value is a removal
plus an addition under `add_remove`: a group of two neighbours).

How far one unit's change reaches follows from the change and the bounds on what one unit may
contribute (`UnitBounds`, as the engines enforce them): every sensitivity starts from `reach`,
the one place where substitution doubles the rows moved.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ProtectedChange(StrEnum):
    """Which datasets are neighbours (the YAML's `neighbours:`)."""

    ADD_REMOVE = "add_remove"
    SUBSTITUTE = "substitute"
    #: A local-DP wave's (`dprelease.local`): one respondent's answer changes and who answered
    #: is public (a release of a wave publishes each cell's respondents). A scope of waves keeps
    #: it for life, so no central release (add/remove or substitute, whose guarantee hides who
    #: is in the data) ever shares a scope with waves; no central spec states it (`central_change`).
    ANSWER = "answer"

    @property
    def value_change_group(self) -> int:
        """k: changing one person's value is a group of k neighbouring changes (2 under
        add/remove: remove the person, add them back with the other value; 1 under substitute).
        Under ε-DP the likelihood ratio of a value change is then within e^{±kε} (Kazan & Reiter,
        Lemma 1); under ρ-zCDP the change is k²ρ-zCDP (group privacy)."""
        return 2 if self is ProtectedChange.ADD_REMOVE else 1


def central_change(value: object) -> object:
    """`value` as given when it names a central release's change (add_remove, substitute);
    ValueError otherwise (callers name the field), with what to write: a central spec or privacy
    profile never states a local wave's `answer`."""
    if value == ProtectedChange.ANSWER:
        raise ValueError(
            "answer is a local wave's neighbours (one answer changes, who answered is public); "
            "a central release protects add_remove or substitute"
        )
    if value not in (ProtectedChange.ADD_REMOVE, ProtectedChange.SUBSTITUTE):
        raise ValueError("Input should be 'add_remove' or 'substitute'")
    return value


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


def reach(change: ProtectedChange, rows: int, *, moves: bool) -> int:
    """Rows one unit's change moves, in L1, over a vector of counts its `rows` kept rows fall in.

    Adding or removing a unit moves its rows. Substituting one removes its rows and adds as many
    others: where those may land on other coordinates of the vector (`moves`: the groups of a
    grouped level, the grid points of a quantile's histograms) that moves twice the rows; where
    they can only replace rows of the same coordinate (an ungrouped count) it moves as many."""
    return 2 * rows if moves and change is ProtectedChange.SUBSTITUTE else rows


@dataclass(frozen=True)
class UnitBounds:
    """What one privacy unit may contribute, as every engine enforces it: at most `rows` (R)
    rows, and where declared at most `groups` (G) groups and `rows_per_group` (R_g) rows in each.
    The spec keeps R ≤ G·R_g, so R is what the last filter enforces and every sensitivity rests
    on it. Without a privacy unit each row is a unit (R = 1); `declared` says whether R was
    given (else it is G·R_g)."""

    rows: int
    groups: int | None = None
    rows_per_group: int | None = None
    unit: bool = True
    declared: bool = True

    @property
    def why(self) -> str:
        """R in words, as a derivation starts."""
        if not self.unit:
            return "each row is a privacy unit: one unit is 1 row"
        if not self.declared:
            return (
                f"one unit keeps at most {self.rows} row(s) (max_rows_per_unit defaults to "
                f"{self.groups} group(s) × {self.rows_per_group} row(s) per group)"
            )
        return f"one unit keeps at most {self.rows} row(s) (max_rows_per_unit)"

    def reach(self, change: ProtectedChange, moves_to: str | None) -> tuple[int, str]:
        """Rows one unit's change moves (`reach`) and why. `moves_to` says where a substituted
        unit's added rows may land on other coordinates ("(possibly in other groups)"); None:
        they can only replace rows of the same coordinate."""
        rows = reach(change, self.rows, moves=moves_to is not None)
        if rows == self.rows:
            return rows, self.why
        return rows, f"{self.why}; substitution removes those rows and adds as many {moves_to}: ×2"
