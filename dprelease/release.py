"""The pure release: data + spec + ε + noise source → noisy table + manifest.

`prepare` decides everything from the spec, ε and the input's declared schema without reading a
row (period, budget split, sensitivity, granularity, noise scales, the manifest), so every
refusal happens before a ledger is charged; `PreparedRelease.run` then reads the data, draws the
noise and post-processes, and nothing in it can fail because of a data value. Nothing here knows
about ledgers or files. PRIVACY.md states the rule this follows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

import polars as pl

import dprelease
from dprelease.accounting import Measurement, Plan, StatisticPlan, plan_release
from dprelease.engines import DataSource, get_engine, new_salt
from dprelease.errors import SpecError
from dprelease.noise import NoiseSource, default_noise_source, discrete_laplace, require_private
from dprelease.postprocess import ROUNDING_RULE, columns, sum_decimals
from dprelease.profile import Neighbours
from dprelease.rational import Epsilon, exact_positive
from dprelease.spec import (
    MOE95_SUFFIX,
    UNDEFINED_SUFFIX,
    CountStatistic,
    LoadedSpec,
    MeanStatistic,
    Month,
    PostProcessing,
    ReleaseSpec,
    SumStatistic,
    resolve_period,
)

MECHANISM = (
    "discrete Laplace (geometric) mechanism, exact sampling after Canonne, Kamath & "
    "Steinke 2020, integer arithmetic, OS CSPRNG bits"
)


def as_fraction(epsilon: Epsilon, field_name: str = "epsilon") -> Fraction:
    """ε as an exact rational (see `dprelease.rational`); errors name the field."""
    try:
        exact = exact_positive(epsilon)
        float(exact)  # the manifest states it as a float too
    except ValueError as exc:
        raise SpecError(field_name, f"ε {exc}") from None
    except OverflowError:
        raise SpecError(field_name, "ε is too large to state as a number") from None
    return exact


@dataclass(frozen=True)
class Release:
    """A finished release: the only two things that may be published."""

    table: pl.DataFrame
    manifest: dict[str, Any]


@dataclass(frozen=True)
class PreparedRelease:
    """A validated release waiting for its data and noise: everything it will publish but the
    noisy values is already decided (`manifest` lacks only the noise source)."""

    data: DataSource
    loaded: LoadedSpec
    plan: Plan
    neighbours: Neighbours
    period: str | None
    month: Month | None
    spec_hash: str
    engine: str
    manifest: dict[str, Any]

    def run(self, noise: NoiseSource | None = None, *, allow_unsafe_noise: bool = False) -> Release:
        """Aggregate exactly, add one batch of discrete Laplace noise per measurement, then
        post-process; the batch size is the public grid size, never a data value."""
        source = noise or default_noise_source()
        require_private(source, allow_unsafe=allow_unsafe_noise)
        engine = get_engine(self.engine)
        exact = engine.aggregate(self.data, self.loaded, self.plan, self.month, new_salt())
        cells, post = self.loaded.cells, self.loaded.spec.postprocess
        noisy = {  # Int128, in units of m.granularity: cannot overflow (|Δ| ≤ 2^53 per row)
            m.name: exact.of(m) + pl.Series(discrete_laplace(m.scale_units, cells, source))
            for m in self.plan.measurements
        }
        table = pl.DataFrame(
            [
                *exact.keys.get_columns(),
                *(col for p in self.plan.statistics for col in columns(p, noisy, post)),
            ]
        )
        noise_source = {
            "bits": source.bit_source,
            "seeded": source.is_seeded,
            "private": not source.is_seeded,
        }
        return Release(table, {**self.manifest, "noise_source": noise_source})


def _guarantee(spec: ReleaseSpec) -> str:
    """What ε protects, in words; under parallel periods only a person within one period."""
    unit = spec.privacy_unit or "row"
    if spec.period is None:
        return f"ε-DP for each privacy unit ({unit}) over the whole input"
    if spec.period.composition == "sequential":
        return (
            f"ε-DP per period for each privacy unit ({unit}); periods compose sequentially: "
            "every period's ε is charged to one lifetime budget, which bounds what all periods "
            "together reveal about a unit"
        )
    return (
        f"ε-DP per period; the privacy unit is a person within a period ({unit} within one "
        "period): periods compose in parallel, each may spend the full budget, so someone "
        "present in k periods is protected only at k times the per-period ε"
    )


def _bounds_entry(spec: ReleaseSpec) -> dict[str, Any]:
    if spec.privacy_unit is None:
        return {"max_rows_per_unit": 1, "how": "each row is a privacy unit"}
    how = "rows kept per unit are chosen at random (CSPRNG-salted hash order)"
    if spec.max_rows_per_unit is None:
        how += "; max_rows_per_unit defaults to max_groups_per_unit × max_rows_per_group"
    return {
        "max_rows_per_unit": spec.rows_per_unit,
        "max_groups_per_unit": spec.max_groups_per_unit,
        "max_rows_per_group": spec.max_rows_per_group,
        "null_units": "rows with a null privacy unit are dropped",
        "how": how,
    }


def _manifest(
    loaded: LoadedSpec,
    plan: Plan,
    neighbours: Neighbours,
    period: str | None,
    spec_hash: str,
    engine: str,
) -> dict[str, Any]:
    """Everything the manifest says but the noise source, from public inputs only."""
    spec = loaded.spec
    return {
        "release_id": None,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "library_version": dprelease.__version__,
        "engine": engine,
        "release": spec.name,
        "source": spec.source,
        "period": period,
        "period_composition": spec.period.composition if spec.period else None,
        "guarantee": _guarantee(spec),
        "spec_hash": spec_hash,
        "mechanism": MECHANISM,
        "neighbours": neighbours.value,
        "privacy_unit": spec.privacy_unit or "each row is a privacy unit",
        "contribution_bounds": _bounds_entry(spec),
        "epsilon_total": float(plan.epsilon_total),
        "epsilon_total_exact": str(plan.epsilon_total),
        "budget_split": plan.split,
        "composition": "sequential over the statistics: their ε add up to the total",
        "group_by": [
            {
                "columns": group.key_columns,
                "keys": domain.height,
                "domain": type(group.domain).__name__.removesuffix("Domain").lower(),
            }
            for group, domain in zip(spec.group_by, loaded.domains, strict=True)
        ],
        "cells": loaded.cells,
        "out_of_domain": "rows whose keys are null, do not convert to the domain's key type, or "
        "lie outside the public domain are dropped",
        "nulls": "a null or NaN summed value (or text that does not parse as a number) counts "
        "as 0 if 0 is within [lower, upper], else as lower; ±inf is clamped to the bounds",
        "postprocessing": {**spec.postprocess.model_dump(), "rounding": ROUNDING_RULE},
        "statistics": [_statistic_entry(p, spec.postprocess) for p in plan.statistics],
    }


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
        "moe95": m.moe95,
        "variance": m.variance,
    }


def _statistic_entry(p: StatisticPlan, post: PostProcessing) -> dict[str, Any]:
    stat, m = p.statistic, p.measurement
    entry: dict[str, Any] = {
        "name": stat.name,
        "kind": stat.kind.value,
        "epsilon": float(p.epsilon),
        "epsilon_exact": str(p.epsilon),
        "mechanism": MECHANISM,
    }
    if not isinstance(stat, CountStatistic):
        entry.update(column=stat.column, lower=stat.lower, upper=stat.upper)
    if isinstance(stat, MeanStatistic):
        reused = " and ".join(repr(name) for name in p.reused)
        entry["how"] = "noisy sum / noisy count (post-processing), clamped to [lower, upper]; " + (
            f"reuses {reused} at no extra ε" if p.reused else "with a sum and a count of its own"
        )
        entry["reuses"] = list(p.reused)
        entry["margin_of_error"] = (
            f"per cell in {stat.name}{MOE95_SUFFIX}: first-order propagation of the sum's and "
            "the count's margins"
        )
        entry["undefined"] = (
            f"null where the noisy count is ≤ 0 (no mean is defined there); "
            f"{stat.name}{UNDEFINED_SUFFIX} is true in those cells"
        )
        entry["measurements"] = [_measurement_entry(own) for own in p.own()]
        return entry
    entry.update({k: v for k, v in _measurement_entry(m).items() if k not in entry})
    if isinstance(stat, SumStatistic):
        entry["decimals"] = sum_decimals(p, post)
    if stat.target_moe95 is not None:
        entry["target_moe95"] = stat.target_moe95
        entry["target_met"] = m.moe95 <= stat.target_moe95
    return entry


def spec_hash(loaded: LoadedSpec) -> str:
    """What a release slot was released from: the spec and its key domains, not ε (the ledger
    stores ε with the charge; a changed ε alone must not look like a changed spec)."""
    return loaded.hash()


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
    "moe95",
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
    engine: str = "polars",
) -> PreparedRelease:
    """Decide the whole release from spec, ε, period and the input's declared schema; reads no
    rows. Every refusal (a typed error naming the field or column) happens here, before a
    caller reserves any budget."""
    eps = as_fraction(epsilon)
    chosen = loaded.spec.neighbours or neighbours or Neighbours.ADD_REMOVE
    if neighbours is not None and loaded.spec.neighbours not in (None, neighbours):
        raise SpecError(
            "release.neighbours",
            f"spec says {loaded.spec.neighbours.value} but the "
            f"privacy configuration says {neighbours.value}; make them agree",
        )
    month = resolve_period(loaded.spec.period, period)
    plan = plan_release(loaded.spec, eps, chosen)
    get_engine(engine).check(data, loaded, plan, month)
    digest = spec_hash(loaded)
    manifest = _manifest(loaded, plan, chosen, period, digest, engine)
    return PreparedRelease(data, loaded, plan, chosen, period, month, digest, engine, manifest)


def release(
    data: DataSource,
    loaded: LoadedSpec,
    epsilon: float | Fraction,
    *,
    neighbours: Neighbours | None = None,
    period: str | None = None,
    engine: str = "polars",
    noise: NoiseSource | None = None,
    allow_unsafe_noise: bool = False,
) -> Release:
    """One-shot release without a ledger (library use and tests); `publish` adds the ledger."""
    prepared = prepare(data, loaded, epsilon, neighbours=neighbours, period=period, engine=engine)
    return prepared.run(noise, allow_unsafe_noise=allow_unsafe_noise)
