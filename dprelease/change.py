"""The protected change: which two datasets differential privacy must make indistinguishable.

Every privacy statement dprelease makes is relative to it. `add_remove` ("unbounded DP") hides
whether one privacy unit is in the data at all; `substitute` ("bounded DP") hides what one unit's
rows are, the number of units being public. The choice moves three things: the sensitivity of a
grouped statistic (a substituted unit's rows may move between groups), and how a release's loss
turns into an odds statement about one person's sensitive value (changing that value is a removal
plus an addition under `add_remove`: a group of two neighbours).
"""

from __future__ import annotations

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
