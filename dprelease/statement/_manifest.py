"""The manifest: a typed, versioned model of everything a release states besides its table.

Each release publishes `manifest.json`; this module is its definition (`Manifest`, format
"dprelease-manifest/2"), its JSON Schema for auditors (`docs/manifest.schema.json`, regenerate
with `python -m dprelease.statement > docs/manifest.schema.json`), and the check a pipeline runs
before publishing (`manifest_problems`, in `_stored` with the manifests earlier versions stored).

Every field is a function of the spec, ε, the period and the declared schema (or of the noise
source and the ledger's bookkeeping), never of the data: see PRIVACY.md.
"""

from __future__ import annotations

import json
from fractions import Fraction
from typing import Annotated, Any, Final, Literal

from pydantic import AwareDatetime, ConfigDict, Field, model_validator

from dprelease.change import ProtectedChange
from dprelease.files import ReadableErrors
from dprelease.loss import Measure, PrivacyLoss

MANIFEST_FORMAT: Final = "dprelease-manifest/2"
#: A release that spends ρ (zCDP) states it in format 3: format 2 with ρ beside ε, the L2
#: sensitivity and the Gaussian's σ². A pure ε release is still written in format 2, byte for
#: byte as before, so every reader of format 2 reads it.
ZCDP_MANIFEST_FORMAT: Final = "dprelease-manifest/3"
#: Keys only format 3 has; a format-2 manifest is written without them.
_FORMAT_3_KEYS = frozenset(
    {
        "measure",
        "delta",
        "rho_total",
        "rho_total_exact",
        "rho",
        "rho_exact",
        "noise_variance_units_exact",
        "sensitivity_norm",
        "sensitivity_squared_units",
        "calibrated_epsilon_exact",
    }
)

#: An exact rational as text ("1/12", "3"): ε as the ledger charges it, a noise scale as sampled.
ExactRational = Annotated[str, Field(pattern=r"^\d+(/\d+)?$", examples=["1/12"])]


class _Model(ReadableErrors):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NoiseSourceEntry(_Model):
    """Where the noise bits came from; only a `private` source makes a publishable release."""

    bits: str
    seeded: bool
    private: bool


class ContributionBounds(_Model):
    """What one privacy unit may contribute (R, G, R_g) and how rows are chosen."""

    max_rows_per_unit: int = Field(description="R: rows kept per unit; Δ rests on it")
    max_groups_per_unit: int | None = None
    max_rows_per_group: int | None = None
    null_units: str | None = None
    how: str


class GroupByEntry(_Model):
    columns: list[str]
    keys: int = Field(description="public keys (or key combinations) in the domain")
    domain: Literal["values", "range", "file"]


class PostprocessingEntry(_Model):
    nonnegative: bool
    decimals: int | None
    moe95_columns: bool
    rounding: str


class MoeRange(_Model):
    """Margins of error that differ between the rows of a level: their smallest and largest."""

    min: float
    max: float


class LevelMeasurementEntry(_Model):
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


class SurveyWeightEntry(_Model):
    """The survey weight a statistic is weighted by: each row counts w times, w clamped to
    [0, upper]; Δ rests on `upper` as it does on a sum's bounds."""

    column: str
    upper: float


class _Measured(_Model):
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


class MeasurementEntry(_Measured):
    """A measurement a mean makes for itself (internal names contain ':')."""

    name: str
    kind: Literal["count", "sum"]


class _Released(_Model):
    name: str
    epsilon: float | None = Field(description="ε this statistic spends itself (None: ρ)")
    epsilon_exact: ExactRational | None
    rho: float | None = Field(default=None, description="zCDP: ρ it spends itself")
    rho_exact: ExactRational | None = None
    mechanism: str


class CountEntry(_Released, _Measured):
    kind: Literal["count"]
    target_moe95: float | None = None
    target_met: bool | None = None


class SumEntry(_Released, _Measured):
    kind: Literal["sum"]
    column: str
    lower: float
    upper: float
    decimals: int | None = Field(description="decimal places published (negative: tens, …)")
    target_moe95: float | None = None
    target_met: bool | None = None


class MeanEntry(_Released):
    kind: Literal["mean"]
    column: str
    lower: float
    upper: float
    how: str
    reuses: list[str] = Field(description="statistics whose noisy values it divides, at no ε")
    margin_of_error: str
    undefined: str
    uninformative: str | None = Field(
        default=None,
        description="where its margin covers its whole [lower, upper] (None: stored by a "
        "version that did not say)",
    )
    measurements: list[MeasurementEntry] = Field(description="what it measures itself")
    survey_weight: SurveyWeightEntry | None = Field(
        default=None, description="weighted: Σ w·x / Σ w (None: every row counts once)"
    )


class QuantileValueEntry(_Model):
    """One p of a quantile statistic: where it is published and what its value costs and says."""

    p: float
    p_exact: ExactRational
    column: str = Field(description="the value's column; `<column>_low`, `_high`: its interval")
    epsilon: float = Field(description="ε of this p's permute-and-flip (its level's cost aside)")
    epsilon_exact: ExactRational
    score_sensitivity: float = Field(
        description="Δ of the score, in ranks: max(p, 1 − p) per row moved"
    )
    coin_scale_exact: ExactRational = Field(
        description="the coins' exact scale 2Δ/ε, in units of 1/(2d) rank for p = a/d"
    )
    rank_error95: float = Field(
        description="data-free: with probability ≥ 95% the value's rank is within this many "
        "ranks of p·n (plus half the rows rounded to the true quantile's grid point)"
    )
    interval_rank_halfwidth95: float = Field(
        description="data-free: how far from p·n (ranks) a ladder cut can be and not be ruled out"
    )


class QuantileEntry(_Released):
    """A quantile statistic (a median: p = 0.5): values and 95% intervals per cell."""

    kind: Literal["quantile", "median"]
    calibrated_epsilon_exact: ExactRational | None = Field(
        default=None,
        description="in a zCDP release: the ε its ρ buys (the largest with ε²/2 ≤ ρ), which the "
        "values and the ladder share as value_epsilon and interval_epsilon",
    )
    column: str
    lower: float
    upper: float
    resolution: float
    grid_points: int = Field(description="B: lower, lower + resolution, …, upper")
    discretization: str
    rows_moved: int = Field(description="rows one unit's change moves over the histograms")
    derivation: str = Field(description="how every sensitivity follows from the bounds")
    value_epsilon: float
    value_epsilon_exact: ExactRational
    level_costs: list[ExactRational] = Field(
        description="per level of the release order (middle p first): its cost in units of a "
        "p's ε; they add up to value_epsilon / ε_p"
    )
    interval_epsilon: float
    interval_epsilon_exact: ExactRational
    interval_share: ExactRational
    interval_noise_scale_exact: ExactRational = Field(
        description="discrete Laplace scale of each ladder block count (L1 Δ = rows_moved)"
    )
    interval_method: str
    coverage: str
    error_in_units: str
    quantiles: list[QuantileValueEntry]


StatisticEntry = Annotated[
    CountEntry | SumEntry | MeanEntry | QuantileEntry, Field(discriminator="kind")
]


class LevelEntry(_Model):
    """One level of a release with margins."""

    level: str = Field(description="its name in the table's `level` column")
    columns: list[str] = Field(description="the key columns it keeps; [] is the grand total")
    rows: int
    weight: float
    share: ExactRational = Field(description="the fraction of each measurement's ε it spends")


class MarginsEntry(_Model):
    """How a release with margins is made consistent (post-processing, no ε)."""

    levels: list[LevelEntry] = Field(description="the cells first, then each margin")
    estimator: str
    nonnegative: str | None = Field(description="the constraint and its caveat; None: unused")
    rounding: str
    margin_of_error: str
    fallbacks: list[str] = Field(
        description="solver fallbacks on this release's noisy values (normally none)"
    )


class LedgerRecord(_Model):
    """The ledger charge this release was stored under."""

    recorded: Literal[True] = True
    scope: str
    charge_id: int
    rerelease: bool


NOT_RECORDED = (
    "not recorded in any ledger: an exploratory release (dp.release without a ledger); its ε "
    "was charged to no budget, so it must not be published"
)


class NotRecorded(_Model):
    recorded: Literal[False] = False
    note: str = NOT_RECORDED


class Manifest(_Model):
    """What a release states about itself (format "dprelease-manifest/2")."""

    format: Literal["dprelease-manifest/2", "dprelease-manifest/3"] = MANIFEST_FORMAT
    release_id: str | None = Field(description="the ledger slot asset/period; None: unrecorded")
    created_at: AwareDatetime
    library_version: str
    engine: str
    release: str
    source: str
    period: str | None
    period_composition: Literal["sequential", "parallel"] | None
    guarantee: str
    spec_hash: str
    mechanism: str
    neighbours: ProtectedChange
    privacy_unit: str
    contribution_bounds: ContributionBounds
    measure: Measure = Field(default=Measure.PURE, description="pure: ε-DP; zcdp: ρ-zCDP")
    delta: float | None = Field(
        default=None, description="zcdp: the δ at which the scope's odds statement is read"
    )
    epsilon_total: float | None
    epsilon_total_exact: ExactRational | None
    rho_total: float | None = None
    rho_total_exact: ExactRational | None = None
    budget_split: Literal["weights", "accuracy targets"]
    composition: str
    group_by: list[GroupByEntry]
    cells: int
    margins: MarginsEntry | None = Field(default=None, description="None: no margins")
    out_of_domain: str
    nulls: str
    postprocessing: PostprocessingEntry
    statistics: list[StatisticEntry]
    noise_source: NoiseSourceEntry
    ledger: LedgerRecord | NotRecorded = NotRecorded()

    @model_validator(mode="after")
    def _spends_its_total(self) -> Manifest:
        if self.measure is Measure.PURE:
            check_total([s.epsilon_exact for s in self.statistics], self.epsilon_total_exact)
        else:
            if self.format != ZCDP_MANIFEST_FORMAT:
                raise ValueError(f"a zcdp release is stated in {ZCDP_MANIFEST_FORMAT}")
            check_total([s.rho_exact for s in self.statistics], self.rho_total_exact)
        return self

    def to_json_dict(self) -> dict[str, Any]:
        """The manifest as `manifest.json` holds it (format 2 without format 3's keys)."""
        data = _without(self.model_dump(mode="json"), _UNWEIGHTED_KEYS, only_null=True)
        return data if self.format == ZCDP_MANIFEST_FORMAT else _without(data, _FORMAT_3_KEYS)


#: Keys an unweighted release leaves out of manifest.json, so its manifest reads as before.
_UNWEIGHTED_KEYS = frozenset({"survey_weight"})


def _without(data: Any, keys: frozenset[str], *, only_null: bool = False) -> Any:
    """`data` with `keys` removed from every mapping in it (with `only_null`: where null)."""
    if isinstance(data, dict):
        return {
            k: _without(v, keys, only_null=only_null)
            for k, v in data.items()
            if k not in keys or (only_null and v is not None)
        }
    if isinstance(data, list):
        return [_without(item, keys, only_null=only_null) for item in data]
    return data


def check_total(spent_by_statistic: list[str | None], total: str | None) -> None:
    """What the statistics spend adds up exactly to the total the manifest states."""
    if total is None or any(spent is None for spent in spent_by_statistic):
        raise ValueError("the total and every statistic must state what they spend")
    spent = sum((Fraction(s) for s in spent_by_statistic if s is not None), Fraction(0))
    if spent != Fraction(total):
        raise ValueError(f"statistics spend {spent}, the total says {total}")


def json_schema() -> str:
    """The published JSON Schema of `Manifest`, as committed in docs/manifest.schema.json."""
    return json.dumps(Manifest.model_json_schema(), indent=2, sort_keys=True) + "\n"


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
