"""What every statistic kind's manifest entry is made of: the loss it spends, each noisy vector's
sensitivity, exact noise and accuracy (at every level of a release with margins), and what the
planner reads back from an entry.

Each kind's own entry model (`CountEntry`, `MeanEntry`, …) lives in its module and derives from
`ReleasedEntry`; the manifest (`statement`) holds one entry per statistic, the union of the
registered kinds' models.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
from pydantic import ConfigDict, Field

from dprelease.files import ReadableErrors
from dprelease.loss import Measure, PrivacyLoss
from dprelease.mechanism.kinds._measurement import Measurement
from dprelease.mechanism.margins import MarginAccuracy, Outcome
from dprelease.spec import StatisticKind

#: An exact rational as text ("1/12", "3"): ε as the ledger charges it, a noise scale as sampled.
ExactRational = Annotated[str, Field(pattern=r"^\d+(/\d+)?$", examples=["1/12"])]


class EntryModel(ReadableErrors):
    # The strict, frozen base of every model a manifest states (no docstring: a model's
    # description in the manifest's JSON Schema is its own docstring).
    model_config = ConfigDict(extra="forbid", frozen=True)


class MoeRange(EntryModel):
    """Margins of error that differ between the rows of a level: their smallest and largest."""

    min: float
    max: float


class LevelMeasurementEntry(EntryModel):
    """One level of a measurement in a release with margins: its own noise, and the accuracy
    of the values released for it."""

    level: str = Field(description="the level's name, as in the table's `level` column")
    epsilon: float | None = Field(description="ε this level spends (None: it spends ρ)")
    epsilon_exact: ExactRational | None
    rho: float | None = Field(default=None, description="zCDP: ρ this level spends")
    rho_exact: ExactRational | None = None
    sensitivity: float = Field(description="Δ in the column's units, over this level's rows")
    sensitivity_units: int | None = Field(description="Δ1 in integer units (Laplace)")
    sensitivity_squared_units: int | None = Field(
        default=None, description="Gaussian: Δ2² in integer units², exact"
    )
    derivation: str
    noise_scale: float
    noise_scale_units_exact: ExactRational | None = Field(description="Laplace: b, exact")
    noise_variance_units_exact: ExactRational | None = Field(
        default=None, description="Gaussian: σ² in integer units², exact"
    )
    measured_moe95: float = Field(
        description="95% margin of error of this level's own noisy values alone (exact)"
    )
    moe95: float | MoeRange = Field(
        description="95% margin of error of the released values of this level (the consistent "
        "estimate, plus max_shift): one number when every row has it, else its range"
    )
    max_shift: float | None = Field(
        description="the additive rounding moves each value of this level by less than this "
        "(value units); None: not rounded"
    )


class SurveyWeightEntry(EntryModel):
    """The survey weight a statistic is weighted by: each row counts w times, w clamped to
    [0, upper]; Δ rests on `upper` as it does on a sum's bounds."""

    column: str
    upper: float


class MeasuredEntry(EntryModel):
    """One noisy integer vector: its ε, Δ (and why), granularity, exact scale and accuracy.

    With margins: ε is every level's together, Δ, the scale and the variance are the cells'
    own noise, moe95 the largest margin of error of the released cells, and `levels` has each
    level."""

    epsilon: float | None = Field(description="ε spent (None: the release spends ρ)")
    epsilon_exact: ExactRational | None
    rho: float | None = Field(default=None, description="zCDP: ρ spent")
    rho_exact: ExactRational | None = None
    calibrated_epsilon_exact: ExactRational | None = Field(
        default=None,
        description="Laplace noise in a zCDP scope: the ε its scale is calibrated to, the "
        "largest with ε²/2 ≤ ρ (ε-DP is ε²/2-zCDP)",
    )
    sensitivity: float = Field(description="Δ in the column's units (L1, or L2 for Gaussian)")
    sensitivity_norm: Literal["L1", "L2"] = "L1"
    sensitivity_units: int | None = Field(description="Δ1 in integer units of `granularity`")
    sensitivity_squared_units: int | None = Field(
        default=None, description="Gaussian: Δ2² in integer units², exact"
    )
    derivation: str = Field(description="how Δ follows from the declared bounds")
    granularity: float
    noise_scale: float = Field(description="Laplace: b; Gaussian: σ; in the column's units")
    noise_scale_units_exact: ExactRational | None = Field(description="Laplace: b, exact")
    noise_variance_units_exact: ExactRational | None = Field(
        default=None, description="Gaussian: σ² in integer units², exact"
    )
    moe95: float = Field(
        description="95% margin of error: P(|error| ≤ moe95) ≥ 0.95, exactly (with margins: "
        "the largest over the released cells)"
    )
    variance: float
    levels: list[LevelMeasurementEntry] | None = Field(
        default=None, description="with margins: every level, the cells first"
    )
    survey_weight: SurveyWeightEntry | None = Field(
        default=None,
        description="weighted: a count is Σ w, a sum Σ w·x (None: every row counts once)",
    )


class MeasurementEntry(MeasuredEntry):
    """A measurement a mean makes for itself (internal names contain ':')."""

    name: str
    kind: Literal["count", "sum"]


def missing_field() -> Any:
    """The `missing` field of the entry of a statistic that reads a column's values."""
    return Field(
        default=None,
        description="how rows without a number in the column were treated, when not by the "
        "nulls rule (None, left out of manifest.json: counted as 0, or as lower when 0 is "
        "outside [lower, upper])",
    )


def missing_text(column: str, missing: str) -> str | None:
    """What an entry states of its `missing` rule (None: the nulls rule, the default)."""
    if missing != "drop":
        return None
    return (
        f"drop: rows without a number in {column!r} (null, NaN, unreadable) are not among its "
        "rows: they add nothing to its sum, are not counted by its count and have no point "
        "in its histogram"
    )


class ReleasedEntry(EntryModel, ABC):
    name: str
    epsilon: float | None = Field(description="ε this statistic spends itself (None: ρ)")
    epsilon_exact: ExactRational | None
    rho: float | None = Field(default=None, description="zCDP: ρ it spends itself")
    rho_exact: ExactRational | None = None
    mechanism: str
    if TYPE_CHECKING:  # every kind's entry narrows it to its own names (the union's tag)
        kind: str

    @abstractmethod
    def accuracy(
        self, by_name: Mapping[str, ReleasedEntry], targets: Mapping[str, float]
    ) -> dict[str, Any]:
        """What the planner states of this statistic (the fields of `StatisticAccuracy`), read
        from its entry: `by_name` holds the release's other entries (a mean's reused sum),
        `targets` the target margins to check."""


def spent(loss: PrivacyLoss) -> dict[str, Any]:
    """The manifest's fields of what a statistic, level or release spends: ε, or ρ."""
    if loss.measure is Measure.PURE:
        return {"epsilon": float(loss.amount), "epsilon_exact": str(loss.amount)}
    return {
        "epsilon": None,
        "epsilon_exact": None,
        "rho": float(loss.amount),
        "rho_exact": str(loss.amount),
    }


def spent_by(entry: ReleasedEntry) -> dict[str, Any]:
    """What a statistic's accuracy states as its manifest entry does, whatever its kind: its
    name and kind, and the loss it spends itself (ε, or ρ)."""
    return {
        "name": entry.name,
        "kind": entry.kind,  # every kind's entry names its kind
        "epsilon": entry.epsilon,
        "epsilon_exact": entry.epsilon_exact,
        "rho": entry.rho,
        "rho_exact": entry.rho_exact,
    }


def levels_accuracy(levels: list[LevelMeasurementEntry] | None) -> list[dict[str, Any]] | None:
    """Each level's ε (or ρ), Δ, scale and margin of error, as the manifest states them."""
    if levels is None:
        return None
    return [{"level": level.level, **noise_of(level)} for level in levels]


def noise_of(measured: MeasuredEntry | LevelMeasurementEntry) -> dict[str, Any]:
    """What the accuracy of one noisy vector (a measurement, or one level) states as the
    manifest does: the loss it spends, its Δ, its noise scale and its margin of error."""
    return {
        "epsilon": measured.epsilon,
        "rho": measured.rho,
        "sensitivity": measured.sensitivity,
        "scale": measured.noise_scale,
        "moe95": measured.moe95,
    }


def measured_fields(
    m: Measurement, margins: MarginAccuracy | None, outcome: Outcome | None
) -> dict[str, Any]:
    """The fields every measurement states (`MeasuredEntry`), and with margins each level's."""
    fields = {
        **spent(m.loss_spent),
        **m.family.stated(m),
        "derivation": m.derivation,
        "granularity": float(m.granularity),
        "moe95": m.moe95,
        "variance": m.variance,
        "survey_weight": weight_entry(m),
    }
    fields.update(m.family.stated_measurement(m))
    if margins is None or outcome is None:
        return fields
    laws = margins.accuracy[m.name]
    shifts = outcome.shifts[m.name]
    published = laws.published_moe95(shifts)
    fields["moe95"] = float(published[0].max())
    fields["levels"] = [
        LevelMeasurementEntry(
            level=margins.levels.name(k),
            **spent(level.loss),
            **level.family.stated(level),
            derivation=level.derivation,
            measured_moe95=level.moe95,
            moe95=moe_range(moe),
            max_shift=shift * laws.unit if laws.rounded else None,
        )
        for k, (level, moe, shift) in enumerate(zip(m.levels, published, shifts, strict=True))
    ]
    return fields


def measurement_entry(
    m: Measurement, margins: MarginAccuracy | None, outcome: Outcome | None
) -> MeasurementEntry:
    """A measurement a statistic makes for itself (a mean's own sum or count)."""
    kind: Literal["count", "sum"] = "count" if m.kind is StatisticKind.COUNT else "sum"
    return MeasurementEntry(name=m.name, kind=kind, **measured_fields(m, margins, outcome))


def weight_entry(m: Measurement) -> SurveyWeightEntry | None:
    weight = m.survey_weight
    return None if weight is None else SurveyWeightEntry(column=weight.column, upper=weight.upper)


def moe_range(moe: np.ndarray) -> float | MoeRange:
    """One number when every row of a level has the same margin of error, else its range."""
    low, high = float(moe.min()), float(moe.max())
    return low if low == high else MoeRange(min=low, max=high)
