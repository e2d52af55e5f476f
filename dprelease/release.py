"""The pure release: data + spec + ε + noise source → noisy table + manifest.

`prepare` validates everything that can be checked without reading a row (spec, schema, budget
split), so a caller can refuse bad input before charging a ledger; `PreparedRelease.run` then
reads the data, draws the noise and post-processes. Nothing here knows about ledgers or files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

import polars as pl

import dprelease
from dprelease.accounting import Measurement, Plan, StatisticPlan, plan_release
from dprelease.engine import DataSource, aggregate, input_schema, validate_schema
from dprelease.errors import SpecError
from dprelease.noise import NoiseSource, default_noise_source, discrete_laplace, require_private
from dprelease.profile import Neighbours
from dprelease.rational import Epsilon, exact_positive
from dprelease.spec import LoadedSpec, StatisticKind

MECHANISM = (
    "discrete Laplace (geometric) mechanism, exact sampling after Canonne, Kamath & "
    "Steinke 2020, integer arithmetic, OS CSPRNG bits"
)


def as_fraction(epsilon: Epsilon, field_name: str = "epsilon") -> Fraction:
    """ε as an exact rational (see `dprelease.rational`); errors name the field."""
    try:
        return exact_positive(epsilon)
    except ValueError as exc:
        raise SpecError(field_name, f"ε {exc}") from None


@dataclass(frozen=True)
class Release:
    """A finished release: the only two things that may be published."""

    table: pl.DataFrame
    manifest: dict[str, Any]


@dataclass(frozen=True)
class PreparedRelease:
    """A validated release waiting for its noise; holds a lazy plan, no data yet."""

    data: DataSource
    loaded: LoadedSpec
    plan: Plan
    neighbours: Neighbours
    period: str | None
    spec_hash: str
    created: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    def run(self, noise: NoiseSource | None = None, *, allow_unsafe_noise: bool = False) -> Release:
        """Aggregate exactly, add one batch of discrete Laplace noise per measurement, then
        post-process; the batch size is the public grid size, never a data value."""
        source = noise or default_noise_source()
        require_private(source, allow_unsafe=allow_unsafe_noise)
        exact = aggregate(self.data, self.loaded, self.plan, self.period)
        cells = exact.grid.height
        noisy: dict[str, pl.Series] = {}
        for m in self.plan.measurements:
            draws = pl.Series(m.name, discrete_laplace(m.scale_units, cells, source))
            noisy[m.name] = exact.values(m) + draws  # int64, in units of m.granularity
        keys = self.loaded.spec.key_columns
        table = pl.DataFrame(
            [
                *(exact.grid.get_column(k) for k in keys),
                *(col for p in self.plan.statistics for col in _columns(p, noisy, self.loaded)),
            ]
        )
        return Release(table, self._manifest(source, cells))

    def _manifest(self, source: NoiseSource, cells: int) -> dict[str, Any]:
        spec = self.loaded.spec
        return {
            "release_id": None,
            "created_at": self.created,
            "library_version": dprelease.__version__,
            "release": spec.name,
            "source": spec.source,
            "period": self.period,
            "spec_hash": self.spec_hash,
            "mechanism": MECHANISM,
            "noise_source": {
                "bits": source.bit_source,
                "seeded": source.is_seeded,
                "private": not source.is_seeded,
            },
            "neighbours": self.neighbours.value,
            "privacy_unit": spec.privacy_unit or "each row is a privacy unit",
            "contribution_bounds": {
                "max_rows_per_unit": spec.max_rows_per_unit,
                "max_groups_per_unit": spec.max_groups_per_unit,
                "max_rows_per_group": spec.max_rows_per_group,
                "how": "rows kept per unit are chosen at random (CSPRNG-salted hash order)",
            },
            "epsilon_total": float(self.plan.epsilon_total),
            "epsilon_total_exact": str(self.plan.epsilon_total),
            "budget_split": self.plan.split,
            "composition": "sequential over the statistics: their ε add up to the total",
            "group_by": [
                {
                    "columns": group.key_columns,
                    "keys": domain.height,
                    "domain": type(group.domain).__name__.removesuffix("Domain").lower(),
                }
                for group, domain in zip(spec.group_by, self.loaded.domains, strict=True)
            ],
            "cells": cells,
            "out_of_domain": "rows whose keys are null or outside the public domain are dropped",
            "nulls": "a null or NaN summed value counts as 0 if 0 is within [lower, upper], "
            "else as lower; ±inf is clamped to the bounds",
            "postprocessing": spec.postprocess.model_dump(),
            "statistics": [_statistic_entry(p) for p in self.plan.statistics],
        }


def _columns(p: StatisticPlan, noisy: dict[str, pl.Series], loaded: LoadedSpec) -> list[pl.Series]:
    post = loaded.spec.postprocess
    stat, m = p.statistic, p.measurement
    if stat.kind is StatisticKind.COUNT:
        values = noisy[m.name]
        if post.nonnegative:
            values = values.clip(lower_bound=0)
        out = [values.alias(stat.name)]
        if post.ci95_columns:
            out.append(pl.Series(f"{stat.name}_ci95", [m.ci95] * len(values), dtype=pl.Float64))
        return out
    total = noisy[m.name].cast(pl.Float64) * float(m.granularity)
    if stat.kind is StatisticKind.SUM:
        if post.nonnegative and m.lower >= 0:
            total = total.clip(lower_bound=0.0)
        out = [_round(total, post.decimals).alias(stat.name)]
        if post.ci95_columns:
            out.append(pl.Series(f"{stat.name}_ci95", [m.ci95] * len(total), dtype=pl.Float64))
        return out
    assert p.count is not None
    count = noisy[p.count.name].cast(pl.Float64).clip(lower_bound=1.0)
    mean = (total / count).clip(m.lower, m.upper)
    out = [_round(mean, post.decimals).alias(stat.name)]
    if post.ci95_columns:  # first-order propagation of both half-widths through sum / count
        half = (m.ci95 + mean.abs() * p.count.ci95) / count
        out.append(_round(half, post.decimals).alias(f"{stat.name}_ci95"))
    return out


def _round(values: pl.Series, decimals: int | None) -> pl.Series:
    return values if decimals is None else values.round(decimals)


def _measurement_entry(m: Measurement) -> dict[str, Any]:
    return {
        "name": m.name,
        "kind": m.kind.value,
        "epsilon": float(m.epsilon),
        "epsilon_exact": str(m.epsilon),
        "sensitivity": m.sensitivity,
        "sensitivity_units": m.sensitivity_units,
        "derivation": m.derivation,
        "granularity": float(m.granularity),
        "noise_scale": m.scale,
        "noise_scale_units_exact": str(m.scale_units),
        "ci95_halfwidth": m.ci95,
        "variance": m.variance,
    }


def _statistic_entry(p: StatisticPlan) -> dict[str, Any]:
    stat, m = p.statistic, p.measurement
    entry: dict[str, Any] = {
        "name": stat.name,
        "kind": stat.kind.value,
        "column": stat.column,
        "lower": stat.lower,
        "upper": stat.upper,
        "epsilon": float(p.epsilon),
        "epsilon_exact": str(p.epsilon),
        "mechanism": MECHANISM,
    }
    if stat.kind is StatisticKind.MEAN:
        shared = p.count.name != f"{stat.name}__count"
        entry["how"] = "noisy sum / noisy count (post-processing), clamped to [lower, upper]; " + (
            "the count is the release's count statistic, at no extra ε"
            if shared
            else "with a count of its own"
        )
        entry["ci95_halfwidth"] = "per cell, first-order propagation of sum and count half-widths"
        entry["measurements"] = [_measurement_entry(m)]
        if not shared:
            entry["measurements"].append(_measurement_entry(p.count))
        return entry
    entry.update({k: v for k, v in _measurement_entry(m).items() if k not in entry})
    if stat.target_ci95 is not None:
        entry["target_ci95"] = stat.target_ci95
        entry["target_met"] = m.ci95 <= stat.target_ci95
    return entry


def spec_hash(loaded: LoadedSpec) -> str:
    """What a release slot was released from: the spec and its key domains, not ε (the ledger
    stores ε with the charge; a changed ε alone must not look like a changed spec)."""
    return loaded.hash("")


#: What a manifest must state for a release to be explainable (checked before publication).
REQUIRED_MANIFEST_FIELDS = (
    "release_id",
    "created_at",
    "library_version",
    "spec_hash",
    "mechanism",
    "noise_source",
    "neighbours",
    "privacy_unit",
    "contribution_bounds",
    "epsilon_total",
    "epsilon_total_exact",
    "budget_split",
    "statistics",
)
REQUIRED_MEASUREMENT_FIELDS = (
    "epsilon",
    "sensitivity",
    "derivation",
    "granularity",
    "noise_scale",
    "noise_scale_units_exact",
    "ci95_halfwidth",
)


def manifest_problems(manifest: dict[str, Any]) -> list[str]:
    """Why a manifest does not fully explain its release (empty: complete and consistent)."""
    problems = [f"missing {key}" for key in REQUIRED_MANIFEST_FIELDS if manifest.get(key) is None]
    if problems:
        return problems
    if not manifest["noise_source"].get("private"):
        problems.append("noise source is seeded: not a private release")
    for stat in manifest["statistics"]:
        parts = stat.get("measurements", [stat])
        problems += [
            f"statistic {stat.get('name')!r}: missing {key}"
            for part in parts
            for key in REQUIRED_MEASUREMENT_FIELDS
            if part.get(key) is None
        ]
    spent = sum((Fraction(s["epsilon_exact"]) for s in manifest["statistics"]), Fraction(0))
    if spent != Fraction(manifest["epsilon_total_exact"]):
        problems.append(
            f"statistics spend {spent}, the total says {manifest['epsilon_total_exact']}"
        )
    return problems


def prepare(
    data: DataSource,
    loaded: LoadedSpec,
    epsilon: float | Fraction,
    *,
    neighbours: Neighbours | None = None,
    period: str | None = None,
) -> PreparedRelease:
    """Validate spec, ε and the input's schema, and plan the budget split; reads no rows."""
    eps = as_fraction(epsilon)
    chosen = loaded.spec.neighbours or neighbours or Neighbours.ADD_REMOVE
    if neighbours is not None and loaded.spec.neighbours not in (None, neighbours):
        raise SpecError(
            "release.neighbours",
            f"spec says {loaded.spec.neighbours.value} but the "
            f"privacy configuration says {neighbours.value}; make them agree",
        )
    schema = input_schema(data)
    validate_schema(schema, loaded, period)
    integer_columns = frozenset(name for name, dtype in schema.items() if dtype.is_integer())
    plan = plan_release(loaded.spec, eps, chosen, integer_columns)
    return PreparedRelease(data, loaded, plan, chosen, period, spec_hash(loaded))


def release(
    data: DataSource,
    loaded: LoadedSpec,
    epsilon: float | Fraction,
    *,
    neighbours: Neighbours | None = None,
    period: str | None = None,
    noise: NoiseSource | None = None,
    allow_unsafe_noise: bool = False,
) -> Release:
    """One-shot release without a ledger (library use and tests); `publish` adds the ledger."""
    prepared = prepare(data, loaded, epsilon, neighbours=neighbours, period=period)
    return prepared.run(noise, allow_unsafe_noise=allow_unsafe_noise)
