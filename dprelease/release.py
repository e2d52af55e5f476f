"""The pure release: data + spec + ε + noise source → noisy table + manifest.

`prepare` decides everything from the spec, ε and the input's declared schema without reading a
row (period, budget split, sensitivity, granularity, noise scales, the manifest), so every
refusal happens before a ledger is charged; `PreparedRelease.run` then reads the data, draws the
noise and post-processes, and nothing in it can fail because of a data value. Nothing here knows
about ledgers or files. PRIVACY.md states the rule this follows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

import polars as pl

import dprelease
from dprelease import operator
from dprelease.accounting import Measurement, Plan, StatisticPlan, plan_release
from dprelease.engines import DataSource, InputSummary, get_engine, new_salt
from dprelease.errors import SpecError
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
from dprelease.noise import NoiseSource, default_noise_source, discrete_laplace, require_private
from dprelease.operator import input_warnings
from dprelease.postprocess import ROUNDING_RULE, columns, sum_decimals
from dprelease.profile import Neighbours
from dprelease.rational import Epsilon, exact_positive
from dprelease.spec import (
    MOE95_SUFFIX,
    UNDEFINED_SUFFIX,
    CountStatistic,
    LoadedSpec,
    Month,
    PostProcessing,
    ReleaseSpec,
    StatisticKind,
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
    """A finished release: the only two things that may be published, and the private input
    fingerprint the ledger keeps (never published)."""

    table: pl.DataFrame
    manifest: dict[str, Any]
    input_fingerprint: str | None = field(default=None, repr=False)


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
        for message in input_warnings(exact.summary, self.loaded.spec.name, self.period):
            operator.warn(message)
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
        manifest = {**self.manifest, "noise_source": noise_source}
        return Release(table, manifest, exact.summary.fingerprint)

    def input_summary(self) -> InputSummary:
        """The private input summary alone (one pass over the input; no noise, no release):
        for a re-run whose stored release is returned, to tell whether the input changed."""
        return get_engine(self.engine).summarize(self.data, self.loaded, self.plan, self.month)


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


def spec_hash(loaded: LoadedSpec) -> str:
    """What a release slot was released from: the spec and its key domains, not ε (the ledger
    stores ε with the charge; a changed ε alone must not look like a changed spec)."""
    return loaded.hash()


def choose_neighbours(spec: ReleaseSpec, configured: Neighbours | None) -> Neighbours:
    """The spec's neighbour definition, else the privacy configuration's, else add/remove;
    SpecError when the two disagree."""
    if configured is not None and spec.neighbours not in (None, configured):
        raise SpecError(
            "release.neighbours",
            f"spec says {spec.neighbours.value} but the "
            f"privacy configuration says {configured.value}; make them agree",
        )
    return spec.neighbours or configured or Neighbours.ADD_REMOVE


def prepare(
    data: DataSource,
    loaded: LoadedSpec,
    epsilon: Epsilon,
    *,
    neighbours: Neighbours | None = None,
    period: str | None = None,
    engine: str = "polars",
) -> PreparedRelease:
    """Decide the whole release from spec, ε, period and the input's declared schema; reads no
    rows. Every refusal (a typed error naming the field or column) happens here, before a
    caller reserves any budget."""
    eps = as_fraction(epsilon)
    chosen = choose_neighbours(loaded.spec, neighbours)
    month = resolve_period(loaded.spec.period, period)
    plan = plan_release(loaded.spec, eps, chosen)
    get_engine(engine).check(data, loaded, plan, month)
    digest = spec_hash(loaded)
    manifest = build_manifest(loaded, plan, chosen, period, digest, engine).to_json_dict()
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
