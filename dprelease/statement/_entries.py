"""What a release states about itself: the manifest's entries, built from the allocation.

Everything here is a function of the resolved spec, the allocation (ε, Δ, granularity, scales),
the period, the engine's name and the noise source, never of the data, so the manifest and the
planner (which states the same entries before any data is read) can say it anywhere.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime

from dprelease._version import version
from dprelease.change import ProtectedChange
from dprelease.loss import Measure, Mechanism
from dprelease.mechanism import (
    ROUNDING_RULE,
    WEIGHTED_ROUNDING,
    Allocated,
    Allocation,
    MarginAccuracy,
    Outcome,
    margin_accuracy,
    noise_family,
)
from dprelease.mechanism.selection import selection_entry
from dprelease.spec import PostProcessing, ReleaseSpec, ResolvedSpec
from dprelease.statement._manifest import (
    MANIFEST_FORMAT,
    ZCDP_MANIFEST_FORMAT,
    ContributionBounds,
    GroupByEntry,
    LevelEntry,
    Manifest,
    MarginsEntry,
    NoiseSourceEntry,
    PostprocessingEntry,
    StatisticEntry,
    spent,
)


def mechanism_text(mechanism: Mechanism, measure: Measure) -> str:
    """How a release's noise was drawn, in words."""
    return noise_family(mechanism).text(measure)


ESTIMATOR = (
    "weighted least squares (inverse-variance weights) of the cells from every level's noisy "
    "values (Hay, Rastogi, Miklau & Suciu 2010): linear and unbiased unless constrained (see "
    "nonnegative); every level is released as sums of the released cells, so each margin "
    "equals the sum of its cells"
)
NONNEGATIVE = (
    "cells constrained to ≥ 0 for {} (the least-squares solve under x ≥ 0, Clarabel): no longer "
    "linear or unbiased. The margins of error are the linear estimator's, so cells are "
    "over-covered but aggregates of sparse tables under-covered: with every true cell 0, only "
    "about 81% of grand totals lie within theirs (8 regions of 2-6 cells, ε split equally). "
    "postprocess.nonnegative: false releases the linear estimate, whose margins are exact"
)
ROUNDING = (
    "controlled rounding (HiGHS): each cell goes to the integer (counts) or the decimal place "
    "(sums, one place per statistic: 'decimals', else the second significant digit of its "
    "smallest margin of error) just below or above its estimate, and each margin to its "
    "estimate rounded down or up, keeping every margin the sum of its cells; each value moves "
    "by less than its level's max_shift"
)
NULLS = (
    "a null or NaN summed value (or text that does not parse as a number) counts as 0 if 0 is "
    "within [lower, upper], else as lower; ±inf is clamped to the bounds"
)
#: What the nulls rule makes of a survey weight, whose bounds [0, W] hold 0.
NULL_WEIGHTS = (
    "; a null or NaN survey weight (or text that does not parse) counts as 0, so its row adds "
    "nothing; weights are clamped to [0, upper] (a negative one counts as 0)"
)
MARGIN_OF_ERROR = (
    "exact 95% quantile of each released value's error, a known linear combination of every "
    "level's {noise} draws (characteristic-function inversion, conservative by at most "
    "about 1.6% of its scale), plus the rounding's max_shift (counts: ⌈h + max_shift⌉ − 1, as "
    "the truth is an integer); a mean's is the first-order propagation of its sum's and count's"
)


#: What a release of randomized answers states instead of a central release's words.
ANSWERS_GUARANTEE = (
    "ε-local DP for each respondent's answer, from the device that randomized it before it was "
    "sent (each statistic's guarantee); this release is post-processing of those reports and "
    "of the public key columns, and charged nothing: each wave's ε was charged to its scope "
    "when the wave was recorded"
)
ANSWERS_MECHANISM = (
    "randomized response on the respondent's device (each statistic's mechanism); no noise is "
    "added at release"
)
ANSWERS_COMPOSITION = (
    "none at release: post-processing of reports randomized on the devices, charged nothing; "
    "each wave's ε is charged to its scope once, when the wave is recorded"
)
ANSWERS_ESTIMATOR = (
    "each margin row is de-biased from its cells' pooled reports (their respondents and support "
    "counts added up), so without the projection it is the sum of its cells' unbiased "
    "estimates; with the projection it is the sum of its projected cells (each statistic's "
    "margin_of_error says how its margin widens)"
)
ANSWERS_NULLS = "a null report is a respondent who did not answer: not counted in the respondents"


def _guarantee(spec: ReleaseSpec, measure: Measure = Measure.PURE) -> str:
    """What the loss protects, in words; under parallel periods only a person within one
    period."""
    unit = spec.privacy_unit or "row"
    dp, symbol = ("ε-DP", "ε") if measure is Measure.PURE else ("ρ-zCDP", "ρ")
    if spec.period is None:
        return f"{dp} for each privacy unit ({unit}) over the whole input"
    if spec.period.composition == "sequential":
        return (
            f"{dp} per period for each privacy unit ({unit}); periods compose sequentially: "
            f"every period's {symbol} is charged to one lifetime budget, which bounds what all "
            "periods together reveal about a unit"
        )
    return (
        f"{dp} per period; the privacy unit is a person within a period ({unit} within one "
        "period): periods compose in parallel, each may spend the full budget, so someone "
        f"present in k periods is protected only at {'k' if measure is Measure.PURE else 'k²'} "
        f"times the per-period {symbol}"
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
    resolved: ResolvedSpec,
    allocation: Allocation,
    neighbours: ProtectedChange,
    period: str | None,
    engine: str,
    margins: MarginAccuracy | None,
    noise_source: NoiseSourceEntry,
    delta: float | None = None,
) -> Manifest:
    """What a release drawn from `noise_source` states, from public inputs only, before its
    noise is drawn: with margins, as planned (`with_outcome` updates it should a solver fall
    back), unrecorded until the ledger stores it (`Manifest.recorded`)."""
    spec = resolved.spec
    plan = allocation
    measure = plan.total.measure
    zcdp = measure is Measure.ZCDP
    outcome = None if margins is None else Outcome.planned(margins)
    total = spent(plan.total)
    weighted = any(m.survey_weight for m in plan.measurements)
    local = spec.of_randomized_answers
    manifest = Manifest(
        format=ZCDP_MANIFEST_FORMAT if zcdp else MANIFEST_FORMAT,
        measure=measure,
        delta=delta if zcdp else None,
        release_id=None,
        created_at=datetime.now(UTC).replace(microsecond=0),
        library_version=version(),
        engine=engine,
        release=spec.name,
        source=spec.source,
        period=period,
        period_composition=spec.period.composition if spec.period else None,
        guarantee=_guarantee(spec, measure),
        spec_hash=resolved.hash,
        mechanism=mechanism_text(plan.mechanism, measure),
        neighbours=neighbours,
        privacy_unit=spec.privacy_unit or "each row is a privacy unit",
        contribution_bounds=_bounds_entry(spec),
        epsilon_total=total["epsilon"],
        epsilon_total_exact=total["epsilon_exact"],
        rho_total=total.get("rho"),
        rho_total_exact=total.get("rho_exact"),
        budget_split=plan.split,
        composition="sequential over the statistics"
        + (" and, within each, over its levels" if margins else "")
        + f": their {measure.symbol} add up to the total",
        group_by=_group_by_entries(resolved),
        cells=resolved.cells,
        margins=None if margins is None or outcome is None else margins_entry(margins, outcome),
        out_of_domain="rows whose keys are null, do not convert to the domain's key type, or "
        "lie outside the public domain are dropped",
        nulls=NULLS + (NULL_WEIGHTS if weighted else ""),
        postprocessing=PostprocessingEntry(
            **spec.postprocess.model_dump(include={"nonnegative", "decimals", "moe95_columns"}),
            rounding=ROUNDING_RULE + (WEIGHTED_ROUNDING if weighted else ""),
        ),
        statistics=[
            statistic_entry(p, spec.postprocess, margins, outcome) for p in plan.statistics
        ],
        selections=[selection_entry(s.plan, s.columns, s.always) for s in plan.selections] or None,
        selection_delta=float(plan.selection_delta) if plan.selections else None,
        noise_source=noise_source,
    )
    return with_randomized_words(manifest) if local else manifest


def with_randomized_words(manifest: Manifest) -> Manifest:
    """A release of randomized answers' manifest: what it guarantees, how it composes and how
    its margin rows are made, in its own words (the central release's do not apply)."""
    update: dict[str, object] = {
        "guarantee": ANSWERS_GUARANTEE,
        "mechanism": ANSWERS_MECHANISM,
        "composition": ANSWERS_COMPOSITION,
        "nulls": ANSWERS_NULLS,
        "privacy_unit": "each respondent's report (one row)",
    }
    update["postprocessing"] = manifest.postprocessing.model_copy(
        update={"rounding": "none: the estimates as they are (publication may round them)"}
    )
    if manifest.margins is not None:
        levels = [level.model_copy(update={"share": "0"}) for level in manifest.margins.levels]
        update["margins"] = manifest.margins.model_copy(
            update={
                "levels": levels,
                "estimator": ANSWERS_ESTIMATOR,
                "rounding": "none: the estimates as they are",
                "margin_of_error": "each statistic's margin_of_error",
            }
        )
    return manifest.model_copy(update=update)


def _group_by_entries(resolved: ResolvedSpec) -> list[GroupByEntry]:
    """Each group-by entry's columns, keys and how they are known (a selected entry's keys:
    those its resolved domain holds, its `always` keys before the selection is drawn)."""
    return [
        GroupByEntry(
            columns=group.key_columns,
            keys=domain.height,
            domain="select" if group.selects else group.domain_kind,
        )
        for group, domain in zip(resolved.spec.group_by, resolved.domains, strict=True)
    ]


def with_selected_keys(manifest: Manifest, resolved: ResolvedSpec) -> Manifest:
    """The manifest of a release whose keys were selected, over the keys it released (a DP
    output): each entry's key count and the cells. Nothing about keys not selected."""
    return manifest.model_copy(
        update={"group_by": _group_by_entries(resolved), "cells": resolved.cells}
    )


def with_outcome(
    manifest: Manifest,
    allocation: Allocation,
    post: PostProcessing,
    margins: MarginAccuracy,
    outcome: Outcome,
) -> Manifest:
    """The manifest as the release's post-processing left it: its rounding bounds and any
    solver fallback (they depend on the noisy values only)."""
    updated = manifest.model_copy(
        update={
            "margins": margins_entry(margins, outcome),
            "statistics": [
                statistic_entry(p, post, margins, outcome) for p in allocation.statistics
            ],
        }
    )
    return with_randomized_words(updated) if manifest.mechanism == ANSWERS_MECHANISM else updated


def _noise_words(margins: MarginAccuracy) -> str:
    """The noise families the levels drew from, in words: a zCDP release's margins of error
    come from discrete Gaussian draws, a pure one's from discrete Laplace ones."""
    names = sorted({law.family.name for laws in margins.accuracy.values() for law in laws.laws})
    return " and ".join(names)


def margins_entry(margins: MarginAccuracy, outcome: Outcome) -> MarginsEntry:
    """How the levels were made consistent, rounded and given margins of error."""
    levels = margins.levels
    constrained = sorted(name for name, laws in margins.accuracy.items() if laws.nonnegative)
    return MarginsEntry(
        levels=[
            LevelEntry(
                level=levels.name(k),
                columns=list(columns),
                rows=levels.sizes[k],
                weight=weight,
                share=str(share),
            )
            for k, (columns, weight, share) in enumerate(
                zip(levels.columns, margins.weights, margins.shares, strict=True)
            )
        ],
        estimator=ESTIMATOR,
        nonnegative=None if not constrained else NONNEGATIVE.format(", ".join(constrained)),
        rounding=ROUNDING,
        margin_of_error=MARGIN_OF_ERROR.format(noise=_noise_words(margins)),
        fallbacks=list(outcome.fallbacks),
    )


def statistic_entry(
    p: Allocated,
    post: PostProcessing,
    margins: MarginAccuracy | None = None,
    outcome: Outcome | None = None,
) -> StatisticEntry:
    """What the manifest says about one statistic (its kind's entry; the planner states the
    same)."""
    return p.entry(post, margins, outcome)


def planned_entries(
    planned: Allocation,
    post: PostProcessing,
    resolved: ResolvedSpec,
    names: Collection[str] | None = None,
) -> list[StatisticEntry]:
    """The manifest's statistic entries of the planned release (only the statistics `names`,
    if given); with margins every level's margins of error."""
    chosen = [p for p in planned.statistics if names is None or p.statistic.name in names]
    measured = {m.name for p in chosen for m in p.vectors}
    margins = margin_accuracy(resolved, planned, measured)
    outcome = None if margins is None else Outcome.planned(margins)
    return [statistic_entry(p, post, margins, outcome) for p in chosen]
