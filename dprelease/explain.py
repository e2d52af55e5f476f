"""What a release states about itself: the manifest's words, built from the plan and spec.

Everything here is a function of the spec, the plan (ε, Δ, granularity, scales), the period
and the engine's name, never of the data, so the manifest and the planner (which states the
same entries before any data is read) can say it anywhere.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import dprelease
from dprelease.accounting import Measurement, Plan, StatisticPlan
from dprelease.manifest import (
    ContributionBounds,
    CountEntry,
    GroupByEntry,
    Manifest,
    MeanEntry,
    MeasurementEntry,
    PostprocessingEntry,
    StatisticEntry,
    SumEntry,
)
from dprelease.postprocess import ROUNDING_RULE, sum_decimals
from dprelease.profile import Neighbours
from dprelease.spec import (
    MOE95_SUFFIX,
    UNDEFINED_SUFFIX,
    CountStatistic,
    LoadedSpec,
    PostProcessing,
    ReleaseSpec,
    StatisticKind,
    SumStatistic,
)

MECHANISM = (
    "discrete Laplace (geometric) mechanism, exact sampling after Canonne, Kamath & "
    "Steinke 2020, integer arithmetic, OS CSPRNG bits"
)


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


def _bounds_entry(spec: ReleaseSpec) -> ContributionBounds:
    if spec.privacy_unit is None:
        return ContributionBounds(max_rows_per_unit=1, how="each row is a privacy unit")
    how = "rows kept per unit are chosen at random (CSPRNG-salted hash order)"
    if spec.max_rows_per_unit is None:
        how += "; max_rows_per_unit defaults to max_groups_per_unit × max_rows_per_group"
    return ContributionBounds(
        max_rows_per_unit=spec.rows_per_unit,
        max_groups_per_unit=spec.max_groups_per_unit,
        max_rows_per_group=spec.max_rows_per_group,
        null_units="rows with a null privacy unit are dropped",
        how=how,
    )


def build_manifest(
    loaded: LoadedSpec,
    plan: Plan,
    neighbours: Neighbours,
    period: str | None,
    spec_hash: str,
    engine: str,
) -> Manifest:
    """Everything the manifest says but the noise source and the ledger, from public inputs."""
    spec = loaded.spec
    return Manifest(
        release_id=None,
        created_at=datetime.now(UTC).replace(microsecond=0),
        library_version=dprelease.__version__,
        engine=engine,
        release=spec.name,
        source=spec.source,
        period=period,
        period_composition=spec.period.composition if spec.period else None,
        guarantee=_guarantee(spec),
        spec_hash=spec_hash,
        mechanism=MECHANISM,
        neighbours=neighbours,
        privacy_unit=spec.privacy_unit or "each row is a privacy unit",
        contribution_bounds=_bounds_entry(spec),
        epsilon_total=float(plan.epsilon_total),
        epsilon_total_exact=str(plan.epsilon_total),
        budget_split=plan.split,
        composition="sequential over the statistics: their ε add up to the total",
        group_by=[
            GroupByEntry(
                columns=group.key_columns,
                keys=domain.height,
                domain=group.domain_kind,
            )
            for group, domain in zip(spec.group_by, loaded.domains, strict=True)
        ],
        cells=loaded.cells,
        out_of_domain="rows whose keys are null, do not convert to the domain's key type, or "
        "lie outside the public domain are dropped",
        nulls="a null or NaN summed value (or text that does not parse as a number) counts "
        "as 0 if 0 is within [lower, upper], else as lower; ±inf is clamped to the bounds",
        postprocessing=PostprocessingEntry(**spec.postprocess.model_dump(), rounding=ROUNDING_RULE),
        statistics=[statistic_entry(p, spec.postprocess) for p in plan.statistics],
        noise_source=None,
    )


def _measured(m: Measurement) -> dict[str, Any]:
    """The fields every measurement states (see `manifest._Measured`)."""
    return {
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


def statistic_entry(p: StatisticPlan, post: PostProcessing) -> StatisticEntry:
    """What the manifest says about one statistic (the planner states the same)."""
    stat, m = p.statistic, p.measurement
    if isinstance(stat, CountStatistic):
        return CountEntry(
            **_measured(m),
            name=stat.name,
            kind="count",
            mechanism=MECHANISM,
            target_moe95=stat.target_moe95,
            target_met=None if stat.target_moe95 is None else m.moe95 <= stat.target_moe95,
        )
    if isinstance(stat, SumStatistic):
        return SumEntry(
            **_measured(m),
            name=stat.name,
            kind="sum",
            mechanism=MECHANISM,
            column=stat.column,
            lower=stat.lower,
            upper=stat.upper,
            decimals=sum_decimals(p, post),
            target_moe95=stat.target_moe95,
            target_met=None if stat.target_moe95 is None else m.moe95 <= stat.target_moe95,
        )
    reused = " and ".join(repr(name) for name in p.reused)
    return MeanEntry(
        name=stat.name,
        kind="mean",
        epsilon=float(p.epsilon),
        epsilon_exact=str(p.epsilon),
        mechanism=MECHANISM,
        column=stat.column,
        lower=stat.lower,
        upper=stat.upper,
        how="noisy sum / noisy count (post-processing), clamped to [lower, upper]; "
        + (f"reuses {reused} at no extra ε" if p.reused else "with a sum and a count of its own"),
        reuses=list(p.reused),
        margin_of_error=f"per cell in {stat.name}{MOE95_SUFFIX}: first-order propagation of "
        "the sum's and the count's margins",
        undefined=f"null where the noisy count is ≤ 0 (no mean is defined there); "
        f"{stat.name}{UNDEFINED_SUFFIX} is true in those cells",
        measurements=[
            MeasurementEntry(
                name=own.name,
                kind="count" if own.kind is StatisticKind.COUNT else "sum",
                **_measured(own),
            )
            for own in p.own()
        ],
    )
