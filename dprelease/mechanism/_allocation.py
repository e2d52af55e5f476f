"""Allocation: from a resolved spec and a release's loss to every statistic's share and how it is
made (its kind's `allocate`), and from those to the row plan the engine runs.

Everything here is computed from declared, public settings, never from data, so the allocation
and the manifest built from it can be published as they are. Nothing here asks which kind a
statistic is: the kinds' registry does (`kinds.kind_of`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from dprelease.change import ProtectedChange
from dprelease.errors import SpecError
from dprelease.loss import Mechanism, PrivacyLoss
from dprelease.mechanism import margins
from dprelease.mechanism.engines import RowPlan
from dprelease.mechanism.kinds import (
    Allocated,
    Context,
    Measurement,
    Prerequisite,
    QuantileAllocation,
    kind_of,
    quantile_allocations,
)
from dprelease.mechanism.margins import MarginAccuracy
from dprelease.mechanism.noise import noise_family
from dprelease.mechanism.selection import SelectionPlan, missing_delta, plan_for_domain
from dprelease.period import Period
from dprelease.spec import ResolvedSpec, SelectDomain, Statistic


@dataclass(frozen=True)
class KeySelection:
    """One selected group-by entry's key selection: its plan (share of the loss, δ, τ) and the
    public keys it releases whatever the data."""

    group: int  # the entry's position in `group_by`
    columns: list[str]
    plan: SelectionPlan
    always: int  # how many public `always` keys (combinations) it lists


@dataclass(frozen=True)
class Allocation:
    """A release's loss allocated: per statistic its share and how it is made, every
    measurement's sensitivity, granularity and noise scale (at every level), and how the total
    was split."""

    statistics: list[Allocated]
    measurements: list[Measurement]
    total: PrivacyLoss
    split: Literal["weights", "accuracy targets"]
    mechanism: Mechanism = Mechanism.LAPLACE
    selections: tuple[KeySelection, ...] = ()  # drawn first: the released keys of each entry

    @property
    def selection_delta(self) -> Fraction:
        """The δ this release's key selections spend (their sum), which the ledger charges."""
        return sum((s.plan.delta for s in self.selections), Fraction(0))

    @property
    def quantiles(self) -> list[QuantileAllocation]:
        """The quantile statistics: each needs its column's histogram per cell."""
        return quantile_allocations(self.statistics)

    @property
    def published(self) -> list[str]:
        """The measurements released in the column's units (each gets a decimal place)."""
        return [name for a in self.statistics for name in a.published()]

    @property
    def prerequisites(self) -> list[Prerequisite]:
        """The ledger records the release rests on (a local-DP wave's charge)."""
        return [p for a in self.statistics for p in a.prerequisites()]

    def row_plan(self, resolved: ResolvedSpec, period: Period | None) -> RowPlan:
        """What the engine computes for this allocation: the rows of every cell, a sum per
        measurement that sums row values, each statistic's histograms (`Allocated.histograms`),
        reading each value column once."""
        columns = [c for m in self.measurements if not m.counts_rows for c in m.read_columns()]
        columns += [c for a in self.statistics for c in a.read_columns()]
        reads = list(dict.fromkeys(columns))
        sums = [units for m in self.measurements if (units := m.units(reads)) is not None]
        tallies = [units for a in self.statistics for units in a.tallies()]
        points = [point for a in self.statistics for point in a.histograms(reads)]
        vectors = [m.name for m in self.measurements] + [units.name for units in tallies]
        sums += tallies
        return RowPlan.of(resolved, period, reads, vectors, sums, points)


def _path(index: int) -> str:
    return f"release.statistics[{index}]"


def spending_statistics(resolved: ResolvedSpec) -> list[Statistic]:
    """The statistics that get a share of the loss (all but means that reuse both parts)."""
    spec = resolved.spec
    return [s for s in spec.statistics if kind_of(s).spends(s, resolved)]


def _targeted(spending: list[Statistic]) -> bool:
    """Whether the loss is split by accuracy targets (the spec has them on every statistic that
    can target, or on none)."""
    return any(s.target() is not None for s in spending)


def allocate(
    resolved: ResolvedSpec,
    loss: PrivacyLoss,
    neighbours: ProtectedChange,
    mechanism: Mechanism = Mechanism.LAPLACE,
    selection_delta: Fraction | None = None,
) -> Allocation:
    """Split a release's loss over its statistics and derive every measurement's sensitivity and
    noise.

    Everything comes from the spec, the loss and the mechanism alone (granularity too:
    declared, else automatic), so the allocation and every refusal are the same whatever the
    data. Raises SpecError, naming the statistic, for anything the sampler or the manifest could
    not handle. The loss is split in its own measure (ε, or ρ), each share spent by the noise
    family of `mechanism` (`noise.noise_family`) or by a kind's selection mechanism.

    The split is by weights, or by what each target needs (accuracy-first); a statistic that
    spends nothing of its own (a mean that reuses a count and a sum) gets none. The measurements
    other statistics may reuse are made first (`Kind.owned`), then every statistic is allocated
    in the spec's order (`Kind.allocate`). With margins every measurement's share is split again
    over its levels (`Measurement.margins`).

    A group-by entry with `select: true` takes a share too (its domain's `weight`, default 1,
    beside the statistics' weights) and an equal part of `selection_delta`, the δ the release's
    key selections may spend (docs/selection.md); it is refused without one.
    """
    spec = resolved.spec
    spending = spending_statistics(resolved)
    if loss.amount <= 0 and (spending or resolved.selected):
        raise SpecError("epsilon", f"{loss.measure.symbol} must be > 0")
    family = noise_family(mechanism)
    if loss.measure not in family.spends:
        raise SpecError("release.mechanism", family.refusal)
    ctx = Context(resolved, neighbours, mechanism, loss.measure)
    accuracy_first = _targeted(spending)
    weights = (
        [kind_of(s).need(s, ctx) for s in spending]
        if accuracy_first  # the spec refuses a statistic that spends without a target then
        else [Fraction(s.weight or 1) for s in spending]
    )
    selecting = _selecting(resolved, accuracy_first, selection_delta)
    parts = [*weights, *(Fraction(d.weight or 1) for _, d in selecting)]
    shares = loss.split(parts) if parts else []
    share_of = dict(zip([s.name for s in spending], shares, strict=False))
    nothing = PrivacyLoss(loss.measure, Fraction(0))
    owned: dict[str, Measurement] = {}
    try:
        for index, stat in enumerate(spec.statistics):
            made = kind_of(stat).owned(stat, share_of.get(stat.name, nothing), ctx, _path(index))
            if made is not None:
                owned[stat.name] = made
        allocated = [
            kind_of(stat).allocate(stat, share_of.get(stat.name, nothing), ctx, owned, _path(index))
            for index, stat in enumerate(spec.statistics)
        ]
    except SpecError as exc:  # at the path the user wrote (a local spec file's `wave.…`)
        raise SpecError(resolved.yaml_path(exc.path), exc.message) from None
    measurements = {m.name: m for a in allocated for m in a.vectors}
    selections = tuple(
        _key_selection(resolved, index, domain, share, selection_delta, len(selecting), neighbours)
        for (index, domain), share in zip(selecting, shares[len(spending) :], strict=True)
    )
    return Allocation(
        allocated,
        list(measurements.values()),
        loss,
        "accuracy targets" if accuracy_first else "weights",
        mechanism,
        selections,
    )


def _selecting(
    resolved: ResolvedSpec, accuracy_first: bool, delta: Fraction | None
) -> list[tuple[int, SelectDomain]]:
    """The selected group-by entries with their domains; refused (naming the entry) with
    accuracy targets, whose split has no share for a selection, or without a δ to spend."""
    selecting = []
    for index in resolved.selected:
        domain = resolved.spec.group_by[index].domain
        assert isinstance(domain, SelectDomain)
        path = f"release.group_by[{index}].domain"
        if accuracy_first:
            raise SpecError(
                path,
                "select: true takes a share by weight, and this spec splits its loss by "
                "accuracy targets: give the statistics weights instead of targets",
            )
        if delta is None:
            raise SpecError(path, missing_delta())
        selecting.append((index, domain))
    return selecting


def _key_selection(
    resolved: ResolvedSpec,
    index: int,
    domain: SelectDomain,
    share: PrivacyLoss,
    delta: Fraction | None,
    parts: int,
    neighbours: ProtectedChange,
) -> KeySelection:
    """The plan of entry `index`'s selection from its share and its part of δ; SpecError naming
    the entry when no threshold meets δ at that share."""
    assert delta is not None
    group = resolved.spec.group_by[index]
    path = f"release.group_by[{index}].domain"
    try:
        plan = plan_for_domain(domain, share, Fraction(delta) / parts, neighbours, path)
    except SpecError:
        raise  # a rule the scope cannot use: named at its own path
    except ValueError as exc:
        raise SpecError(path, str(exc)) from None
    return KeySelection(index, group.key_columns, plan, len(domain.always or []))


def margin_accuracy(
    resolved: ResolvedSpec, allocation: Allocation, only: Collection[str] | None = None
) -> MarginAccuracy | None:
    """The public facts of a release with margins (None without): every level's laws and
    margins of error of the allocation's measurements (`only`: of those named), before any
    noise is drawn."""
    return margins.margin_accuracy(resolved, allocation.measurements, allocation.published, only)
