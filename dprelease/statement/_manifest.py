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
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, Union

from pydantic import AwareDatetime, Field, model_validator

from dprelease.change import ProtectedChange
from dprelease.loss import Measure
from dprelease.mechanism.kinds import (
    ENTRY_MODELS,
    CountEntry,
    EntryModel,
    ExactRational,
    LevelMeasurementEntry,
    MeanEntry,
    MeasurementEntry,
    MoeRange,
    QuantileEntry,
    QuantileValueEntry,
    ReleasedEntry,
    SumEntry,
    SurveyWeightEntry,
    spent,
)
from dprelease.mechanism.selection import SelectionEntry
from dprelease.statement._publication import PublicationEntry

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


class NoiseSourceEntry(EntryModel):
    """Where the noise bits came from; only a `private` source makes a publishable release."""

    bits: str
    seeded: bool
    private: bool


class ContributionBounds(EntryModel):
    """What one privacy unit may contribute (R, G, R_g) and how rows are chosen."""

    max_rows_per_unit: int = Field(description="R: rows kept per unit; Δ rests on it")
    max_groups_per_unit: int | None = None
    max_rows_per_group: int | None = None
    null_units: str | None = None
    how: str


class GroupByEntry(EntryModel):
    columns: list[str]
    keys: int = Field(description="public keys (or key combinations) in the domain")
    domain: Literal["values", "range", "file", "select"] = Field(
        description="how the keys are known: a public list (values, range, file) or selected "
        "from the data by DP (select: then `keys` counts the keys released, a DP output)"
    )


class PostprocessingEntry(EntryModel):
    nonnegative: bool
    decimals: int | None
    moe95_columns: bool
    rounding: str


if TYPE_CHECKING:
    StatisticEntry = ReleasedEntry
else:  # one entry per statistic: the union of every registered kind's entry model
    StatisticEntry = Annotated[Union[ENTRY_MODELS], Field(discriminator="kind")]  # noqa: UP007


class LevelEntry(EntryModel):
    """One level of a release with margins."""

    level: str = Field(description="its name in the table's `level` column")
    columns: list[str] = Field(description="the key columns it keeps; [] is the grand total")
    rows: int
    weight: float
    share: ExactRational = Field(description="the fraction of each measurement's ε it spends")


class MarginsEntry(EntryModel):
    """How a release with margins is made consistent (post-processing, no ε)."""

    levels: list[LevelEntry] = Field(description="the cells first, then each margin")
    estimator: str
    nonnegative: str | None = Field(description="the constraint and its caveat; None: unused")
    rounding: str
    margin_of_error: str
    fallbacks: list[str] = Field(
        description="solver fallbacks on this release's noisy values (normally none)"
    )


class LedgerRecord(EntryModel):
    """The ledger charge this release was stored under."""

    recorded: Literal[True] = True
    scope: str
    charge_id: int
    rerelease: bool


NOT_RECORDED = (
    "not recorded in any ledger: an exploratory release (dp.release without a ledger); its ε "
    "was charged to no budget, so it must not be published"
)


class NotRecorded(EntryModel):
    recorded: Literal[False] = False
    note: str = NOT_RECORDED


class Manifest(EntryModel):
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
    selections: list[SelectionEntry] | None = Field(
        default=None,
        description="the key selections of group-by columns with select: true (None: none)",
    )
    selection_delta: float | None = Field(
        default=None,
        description="δ the key selections spend, a budget of its own (not the δ ρ is read at)",
    )
    noise_source: NoiseSourceEntry
    ledger: LedgerRecord | NotRecorded = NotRecorded()
    publication: PublicationEntry | None = Field(
        default=None,
        description="rules, rounding base and sampling error applied for publication (None: "
        "none; left out of manifest.json)",
    )

    @model_validator(mode="after")
    def _spends_its_total(self) -> Manifest:
        selections: list[str | None] = [s.share_exact for s in self.selections or []]
        if self.measure is Measure.PURE:
            spent = [s.epsilon_exact for s in self.statistics]
            check_total(spent + selections, self.epsilon_total_exact)
        else:
            if self.format != ZCDP_MANIFEST_FORMAT:
                raise ValueError(f"a zcdp release is stated in {ZCDP_MANIFEST_FORMAT}")
            check_total([s.rho_exact for s in self.statistics] + selections, self.rho_total_exact)
        return self

    def to_json_dict(self) -> dict[str, Any]:
        """The manifest as `manifest.json` holds it (format 2 without format 3's keys)."""
        data = _without(self.model_dump(mode="json"), _UNWEIGHTED_KEYS, only_null=True)
        if data["publication"] is None:  # a release without publication options reads as before
            del data["publication"]
        return data if self.format == ZCDP_MANIFEST_FORMAT else _without(data, _FORMAT_3_KEYS)


#: Keys an unweighted release leaves out of manifest.json, so its manifest reads as before.
#: (Likewise the key selection's entries of a release without one, and the `missing` rule of
#: a statistic that follows the default nulls rule.)
_UNWEIGHTED_KEYS = frozenset({"survey_weight", "selections", "selection_delta", "missing"})


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


__all__ = [
    "MANIFEST_FORMAT",
    "NOT_RECORDED",
    "ZCDP_MANIFEST_FORMAT",
    "ContributionBounds",
    "CountEntry",
    "ExactRational",
    "GroupByEntry",
    "LedgerRecord",
    "LevelEntry",
    "LevelMeasurementEntry",
    "Manifest",
    "MarginsEntry",
    "MeanEntry",
    "MeasurementEntry",
    "MoeRange",
    "NoiseSourceEntry",
    "NotRecorded",
    "PostprocessingEntry",
    "QuantileEntry",
    "QuantileValueEntry",
    "StatisticEntry",
    "SumEntry",
    "SurveyWeightEntry",
    "check_total",
    "json_schema",
    "spent",
]
