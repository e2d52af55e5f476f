"""Plan before spending: what ε buys (per statistic: share, Δ, noise scale, 95% margin of error),
and the inverse, the smallest ε that meets target margins (`_search`). Reads no data.

Both directions use the functions a release uses (`allocate`, the manifest's statistic entries),
so a plan states exactly what the release at that ε will state in its manifest. Which ε a release
of a spec spends is decided elsewhere, once for every interface (`dprelease.publish.decide_budget`).
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from dprelease.change import ProtectedChange
from dprelease.errors import ConfigError, SpecError
from dprelease.loss import Measure, Mechanism, PrivacyLoss, amount_text, loss_text
from dprelease.mechanism import Allocation, allocate, kind_of
from dprelease.mechanism.selection import SelectionReport, plan_report
from dprelease.spec import ReleaseSpec, ResolvedSpec
from dprelease.statement._compare import MeasureComparison
from dprelease.statement._entries import planned_entries
from dprelease.statement._manifest import (
    ExactRational,
    MoeRange,
    StatisticEntry,
    spent,
)
from dprelease.statement._publication import PublicationPlan
from dprelease.statement._search import epsilon_for_targets

#: 2: the measure and mechanism, ρ beside ε (None where a zCDP release spends no ε).
PLAN_FORMAT: Final = "dprelease-plan/2"


class LevelAccuracy(BaseModel):
    """One level of a statistic in a release with margins."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    level: str = Field(description="as in the released table's `level` column")
    epsilon: float | None = Field(description="ε this level's noise spends (None: ρ)")
    rho: float | None = Field(default=None, description="zCDP: ρ this level's noise spends")
    sensitivity: float = Field(description="Δ of this level's rows, in the column's units")
    scale: float = Field(description="the level's own noise scale, in the column's units")
    moe95: float | MoeRange = Field(
        description="95% margin of error of the released values (consistent and rounded)"
    )


class MeasurementAccuracy(BaseModel):
    """A noisy sum or count a mean measures for itself, from its own ε."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["count", "sum"]
    epsilon: float | None = Field(description="ε it spends, every level's together (None: ρ)")
    rho: float | None = Field(default=None, description="zCDP: ρ it spends")
    sensitivity: float = Field(description="Δ in the column's units (L1; L2 for Gaussian)")
    scale: float = Field(description="noise scale (Laplace b, Gaussian σ), in the column's units")
    moe95: float = Field(description="95% margin of error (half-width) of its own values")
    levels: list[LevelAccuracy] | None = Field(
        default=None, description="with margins: every level, the cells first"
    )


class QuantileAccuracy(BaseModel):
    """One p of a quantile statistic: its data-free 95% accuracy, in ranks (survey-weighted:
    in weight, the statistic's `weighted_by`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    p: float
    column: str
    rank_error95: float = Field(
        description="95%: the value's rank is within this of p·n (weighted: the weight below "
        "it is within this of p·Σw)"
    )
    interval_rank_halfwidth95: float = Field(
        description="how far from p·n (ranks; weighted: from p·Σw, in weight) an interval's end "
        "can lie (data-free bound)"
    )


class StatisticAccuracy(BaseModel):
    """One statistic's accuracy at the planned (or released) ε.

    For a mean, Δ and the scale are its sum's and `moe95` is None: its margin depends on each
    cell's noisy count (see the `<mean>_moe95` column). With margins, the scale is the cells'
    own noise, `moe95` the largest margin of error of the released cells, and `levels` each
    level's. A quantile's error is in ranks (`quantiles`), its Δ the largest score Δ in ranks;
    survey-weighted (`weighted_by`), both are weight mass (Σ w) instead. It has no scale in the
    column's units and no margin of error.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    kind: str = Field(description="the statistic's kind, as its spec's `kind:`")
    epsilon: float | None = Field(description="ε this statistic spends itself (None: ρ)")
    epsilon_exact: ExactRational | None
    rho: float | None = Field(default=None, description="zCDP: ρ this statistic spends itself")
    rho_exact: ExactRational | None = None
    sensitivity: float = Field(
        description="Δ in the column's units (L1; L2 for Gaussian; a quantile: its score's "
        "largest Δ, in ranks, or in weight when `weighted_by` is set)"
    )
    derivation: str = Field(description="how Δ follows from the declared bounds")
    scale: float | None = Field(
        description="noise scale (Laplace b, Gaussian σ), in the column's units (None: a "
        "quantile, whose errors are in ranks)"
    )
    moe95: float | None = Field(description="95% margin of error (half-width)")
    target_moe95: float | None = None
    target_met: bool | None = None
    reuses: list[str] = Field(default_factory=list, description="what a mean divides, at no ε")
    levels: list[LevelAccuracy] | None = Field(
        default=None, description="with margins: every level, the cells first"
    )
    measurements: list[MeasurementAccuracy] = Field(
        default_factory=list, description="a mean: the sum and count it measures itself"
    )
    quantiles: list[QuantileAccuracy] | None = Field(
        default=None,
        description="a quantile statistic: each p's accuracy in ranks (weighted: in weight)",
    )
    weighted_by: str | None = Field(
        default=None,
        exclude_if=lambda column: column is None,  # an unweighted plan reads as before
        description="a survey-weighted quantile: its weight column; its Δ and errors are then "
        "weight mass (Σ w of that column, clamped), not ranks of rows",
    )
    error_in_units: str | None = Field(
        default=None,
        description="a quantile: its error in the column's units, as far as it "
        "can be said without data",
    )

    @property
    def rank_unit(self) -> str:
        """What a quantile's Δ and errors count: rows ("ranks"), or weight under a survey
        weight (a row moves them by up to its weight, not by one)."""
        return "ranks" if self.weighted_by is None else "weight"


class ReleasePlan(BaseModel):
    """What a release of `release` at `epsilon_total` will state, and the smallest ε for the
    targets (`dprelease plan --json` prints this; the keys are stable)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["dprelease-plan/2"] = PLAN_FORMAT
    release: str
    neighbours: ProtectedChange
    measure: Measure = Field(description="pure: the release spends ε; zcdp: ρ")
    mechanism: Mechanism = Field(description="laplace or gaussian noise")
    epsilon_total: float | None
    epsilon_total_exact: ExactRational | None
    rho_total: float | None = None
    rho_total_exact: ExactRational | None = None
    budget_split: Literal["weights", "accuracy targets"]
    statistics: list[StatisticAccuracy]
    targets: dict[str, Annotated[float, Field(gt=0)]] = Field(
        description="target margins checked: the spec's target_moe95, overridden by --target"
    )
    targets_met: bool | None = Field(description="None when there are no targets")
    epsilon_for_targets: float | None
    epsilon_for_targets_exact: ExactRational | None
    comparison: MeasureComparison | None = Field(
        default=None, description="with --compare: the margins under pure ε and under zCDP"
    )
    publication: PublicationPlan | None = Field(
        default=None,
        description="with a rounding base or reliability rules: what they do to each value",
    )
    selections: list[SelectionReport] | None = Field(
        default=None,
        exclude_if=lambda selections: selections is None,  # a plan without reads as before
        description="each key selection (select: true): τ, the keep probabilities for n units, "
        "the δ it spends and what stays of the scope's selection δ budget (before what the "
        "ledger has spent: `dprelease ledger status`)",
    )

    def __repr__(self) -> str:
        """What the release will spend and state per statistic, as `print(dp.plan(...))` shows
        it (the fields are the JSON of `dprelease plan --json`)."""
        return plan_text(self)

    __str__ = __repr__

    def _repr_html_(self) -> str:
        """The same, as a table in a notebook."""
        return plan_html(self)


def accuracy_of(
    entries: list[StatisticEntry], targets: Mapping[str, float] | None = None
) -> list[StatisticAccuracy]:
    """Per statistic accuracy from manifest entries (a plan's or a release's), with `targets`
    (default: the entries' own) checked against the margins: what each kind's entry says of
    itself (`ReleasedEntry.accuracy`)."""
    by_name = {entry.name: entry for entry in entries}
    return [StatisticAccuracy(**entry.accuracy(by_name, targets or {})) for entry in entries]


def plan(
    resolved: ResolvedSpec,
    loss: PrivacyLoss | None,
    neighbours: ProtectedChange,
    *,
    targets: Mapping[str, float] | None = None,
    mechanism: Mechanism = Mechanism.LAPLACE,
    measure: Measure | None = None,
    selection_delta: Fraction | None = None,
    selection_delta_budget: Fraction | None = None,
    selection_delta_spent: Fraction = Fraction(0),
) -> ReleasePlan:
    """What a release of `resolved` spending `loss` by `mechanism` states per statistic (and,
    spending `selection_delta` of the scope's `selection_delta_budget`, of which the ledger
    says `selection_delta_spent` is spent, per key selection), without reading data.

    `targets` (statistic name → wanted 95% margin of error) override the spec's `target_moe95`;
    with targets the plan also gives the smallest loss (in `measure`, default the loss's, else
    the mechanism's own) that meets them all, and plans at it when `loss` is None. SpecError
    names what is wrong.
    """
    spec = resolved.spec
    measure = measure or (loss.measure if loss is not None else mechanism.native_measure)
    wanted = _targets(spec, targets or {})
    needed = (
        epsilon_for_targets(resolved, wanted, neighbours, measure, mechanism) if wanted else None
    )
    if loss is not None:
        total = loss.amount
    elif needed is not None:
        total = needed
    else:
        raise SpecError(
            "epsilon", "give ε (--epsilon or --config), or target margins (target_moe95, --target)"
        )
    planned = allocate(
        resolved, PrivacyLoss(measure, total), neighbours, mechanism, selection_delta
    )
    entries = planned_entries(planned, spec.postprocess, resolved)
    rows = accuracy_of(entries, wanted)
    scope_delta = selection_delta_budget or planned.selection_delta
    stated = spent(planned.total)
    return ReleasePlan(
        release=spec.name,
        neighbours=neighbours,
        measure=measure,
        mechanism=mechanism,
        epsilon_total=stated["epsilon"],
        epsilon_total_exact=stated["epsilon_exact"],
        rho_total=stated.get("rho"),
        rho_total_exact=stated.get("rho_exact"),
        budget_split=planned.split,
        statistics=rows,
        targets=wanted,
        targets_met=all(r.target_met for r in rows if r.target_moe95 is not None)
        if wanted
        else None,
        epsilon_for_targets=None if needed is None else float(needed),
        epsilon_for_targets_exact=None if needed is None else str(needed),
        selections=_selection_reports(planned, scope_delta, selection_delta_spent) or None,
    )


def _selection_reports(
    planned: Allocation, scope_delta: Fraction | None, spent: Fraction
) -> list[SelectionReport]:
    """Each selection's report against what stays of the scope's δ: selections before it in
    the spec spend first. ConfigError (naming `selection_delta`) when one does not fit."""
    reports = []
    for selection in planned.selections:
        assert scope_delta is not None  # `allocate` refuses a selection without a δ
        try:
            reports.append(
                plan_report(
                    selection.plan, selection.columns, scope_delta, spent, always=selection.always
                )
            )
        except ValueError as exc:
            raise ConfigError("selection_delta", str(exc)) from None
        spent += selection.plan.delta
    return reports


def _targets(spec: ReleaseSpec, given: Mapping[str, float]) -> dict[str, float]:
    """The spec's targets with `given` on top; only counts and sums have a margin to target."""
    statistics = {s.name: s for s in spec.statistics}
    for name, value in given.items():
        if name not in statistics:
            raise SpecError("target", f"no statistic {name!r} in release {spec.name!r}")
        stat = statistics[name]
        if not stat.targetable():
            raise SpecError("target", kind_of(stat).no_target(stat))
        if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
            raise SpecError("target", f"the target of {name!r} must be a number > 0")
    found = {
        s.name: target
        for s in spec.statistics
        if s.targetable() and (target := s.target()) is not None
    }
    return {**found, **{name: float(value) for name, value in given.items()}}


# A plan as a person reads it in a notebook or a REPL: `print(dp.plan(...))` and Jupyter's rich
# display show what the release will spend and state per statistic, not the raw model (its fields
# stay the stable JSON of `dprelease plan --json`).

#: The columns of a plan's table: one row per statistic (a quantile: one per p).
COLUMNS = ("statistic", "kind", "{symbol}", "Δ", "scale", "±95%", "target")


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.4g}"


def _spent(row: StatisticAccuracy) -> str:
    return _num(row.epsilon if row.rho is None else row.rho)


def _rows(row: StatisticAccuracy) -> list[tuple[str, ...]]:
    """A statistic's rows: its spend, Δ, scale and margin; a mean's margin is per cell, and a
    quantile states each p's 95% error in ranks (survey-weighted: in weight) instead."""
    target = "" if row.target_moe95 is None else _num(row.target_moe95)
    if row.target_met is not None:
        target += " ok" if row.target_met else " MISSED"
    if row.quantiles:
        unit = row.rank_unit
        first = (row.name, row.kind, _spent(row), f"{_num(row.sensitivity)} {unit}", "–")
        return [
            (*(first if i == 0 else ("",) * 5), f"p = {q.p:g}: {_num(q.rank_error95)} {unit}", "")
            for i, q in enumerate(row.quantiles)
        ]
    moe = "per cell" if row.moe95 is None else _num(row.moe95)
    return [(row.name, row.kind, _spent(row), _num(row.sensitivity), _num(row.scale), moe, target)]


def _header(plan: ReleasePlan) -> str:
    if plan.rho_total_exact is not None:
        spends = f"{loss_text(Measure.ZCDP, Fraction(plan.rho_total_exact))} (zCDP)"
    elif plan.epsilon_total_exact is not None:
        spends = loss_text(Measure.PURE, Fraction(plan.epsilon_total_exact))
    else:
        spends = "no ε or ρ given"
    if plan.statistics and all(row.kind == "randomized" for row in plan.statistics):
        # answers randomized on the devices: the release adds nothing and spends nothing
        noise = "no noise at release (answers randomized on the devices)"
    else:
        noise = f"{plan.mechanism.value} noise"
    return (
        f"release {plan.release!r} at {spends}: {noise}, split by "
        f"{plan.budget_split}, {plan.neighbours.value} neighbours"
    )


def _footer(plan: ReleasePlan) -> list[str]:
    lines = []
    if plan.epsilon_for_targets_exact is not None:
        smallest = amount_text(Fraction(plan.epsilon_for_targets_exact))
        lines.append(f"smallest {plan.measure.symbol} meeting every target: {smallest}")
    if plan.comparison is not None:
        lines.append(f"pure ε or zCDP: smaller margins: {plan.comparison.smaller}")
    return lines


def _table(plan: ReleasePlan) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    head = tuple(c.format(symbol=plan.measure.symbol) for c in COLUMNS)
    return head, [cells for row in plan.statistics for cells in _rows(row)]


def plan_text(plan: ReleasePlan) -> str:
    """The plan in plain text: a header line, one aligned row per statistic (or p), and the
    smallest loss for the targets when there are targets."""
    head, rows = _table(plan)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = [
        "  ".join(
            cell.ljust(w) if i < 2 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()  # fmt: skip
        for cells in [head, *rows]
    ]
    return "\n".join([_header(plan), *lines, *_footer(plan)])


def plan_html(plan: ReleasePlan) -> str:
    """The plan as HTML for a notebook: the same header, table and footer, escaped."""
    head, rows = _table(plan)
    cells = "".join(f"<th>{html.escape(c)}</th>" for c in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows
    )
    notes = "".join(f"<p>{html.escape(line)}</p>" for line in _footer(plan))
    return (
        f"<p>{html.escape(_header(plan))}</p>"
        f"<table><thead><tr>{cells}</tr></thead><tbody>{body}</tbody></table>{notes}"
    )
