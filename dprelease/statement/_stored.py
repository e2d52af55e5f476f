"""A manifest as a ledger stored it or a folder holds it: today's format or an earlier one.

Publication reads manifests back (a re-run returns the stored release; the pipeline checks the
files it is about to publish), so every format this version ever wrote must parse, and the check
before publishing (`manifest_problems`) must hold for each.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from dprelease.statement._manifest import (
    ExactRational,
    Manifest,
    NoiseSourceEntry,
    check_total,
)


class _LegacyMeasurement(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    epsilon: float
    sensitivity: float
    derivation: str
    granularity: float
    noise_scale: float
    noise_scale_units_exact: str
    ci95_halfwidth: float


class _LegacyStatistic(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    name: str
    epsilon_exact: ExactRational
    measurements: list[_LegacyMeasurement]

    @model_validator(mode="before")
    @classmethod
    def _flattened(cls, data: Any) -> Any:
        """Counts and sums carried their one measurement's fields at the top level."""
        if isinstance(data, dict) and "measurements" not in data:
            return {**data, "measurements": [data]}
        return data


class LegacyManifest(BaseModel):
    """A manifest stored by dprelease before format 2 (`_ci95` columns, hand-built dict):
    what its publication check required, so stored releases stay valid."""

    model_config = ConfigDict(extra="allow", frozen=True)

    release_id: str | None
    created_at: str
    library_version: str
    spec_hash: str
    mechanism: str
    noise_source: NoiseSourceEntry | None
    neighbours: str
    privacy_unit: str
    contribution_bounds: dict[str, Any]
    epsilon_total: float
    epsilon_total_exact: ExactRational
    budget_split: str
    statistics: list[_LegacyStatistic]

    @model_validator(mode="after")
    def _spends_its_total(self) -> LegacyManifest:
        check_total([s.epsilon_exact for s in self.statistics], self.epsilon_total_exact)
        return self


def parse_manifest(data: dict[str, Any]) -> Manifest | LegacyManifest:
    """A stored or published manifest as its model (by its `format`); ValidationError if it is
    not a complete, consistent manifest of a format this version knows."""
    if "format" in data:
        return Manifest.model_validate(data)
    return LegacyManifest.model_validate(data)


def manifest_problems(data: dict[str, Any]) -> list[str]:
    """Why a manifest may not be published (empty: complete, consistent, private noise)."""
    try:
        manifest = parse_manifest(data)
    except ValidationError as exc:
        return [
            f"{'.'.join(str(part) for part in error['loc']) or 'manifest'}: {error['msg']}"
            for error in exc.errors()
        ]
    problems = []
    if manifest.release_id is None:
        problems.append("missing release_id: not recorded in a ledger")
    if manifest.noise_source is None:  # only a manifest of format 1 can lack it
        problems.append("missing noise_source: no noise was drawn")
    elif not manifest.noise_source.private:
        problems.append("noise source is seeded: not a private release")
    return problems
