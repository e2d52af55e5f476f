"""The search behind `epsilon_for_targets` (see the planner's docstring): each statistic's share
of a unit loss, the losses at which an automatic granularity changes, and the smallest multiple
of a decimal step that meets every target on ranges where meeting them is monotone."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from fractions import Fraction

from dprelease.change import ProtectedChange
from dprelease.loss import Measure, Mechanism, PrivacyLoss
from dprelease.mechanism import allocate, granularity_references
from dprelease.spec import ReleaseSpec, ResolvedSpec, StatisticModel

SIGNIFICANT_DIGITS = 6


def _shares(
    resolved: ResolvedSpec,
    neighbours: ProtectedChange,
    measure: Measure = Measure.PURE,
    mechanism: Mechanism = Mechanism.LAPLACE,
) -> dict[str, Fraction]:
    """ε_j / ε (ρ_j / ρ) per statistic: the split is linear in the loss."""
    planned = allocate(resolved, PrivacyLoss(measure, Fraction(1)), neighbours, mechanism)
    return {p.statistic.name: p.loss.amount for p in planned.statistics}


def _targeted(spec: ReleaseSpec, targets: Mapping[str, float]) -> list[StatisticModel]:
    """The statistics with a target margin (of a kind that can have one)."""
    return [s for s in spec.statistics if s.targetable() and s.name in targets]


def _granularity_cuts(
    resolved: ResolvedSpec,
    targets: Mapping[str, float],
    neighbours: ProtectedChange,
    low: Fraction,
    high: Fraction,
    measure: Measure = Measure.PURE,
    mechanism: Mechanism = Mechanism.LAPLACE,
) -> list[Fraction]:
    """The losses in (low, high] at which a targeted sum's (or weighted count's) automatic
    granularity changes (the scale of one of its levels crosses a power of two); between them
    every margin is monotone in the loss. The scale is ∝ 1/ε, or ∝ 1/√ρ under zCDP
    (`granularity_references`)."""
    share = _shares(resolved, neighbours, measure, mechanism)
    cuts = []
    for stat in _targeted(resolved.spec, targets):
        value = stat.row_value(resolved.spec)
        if value is None or value.granularity is not None:  # rows, or a declared granularity
            continue
        for ref in granularity_references(
            value, resolved, neighbours, PrivacyLoss(measure, share[stat.name])
        ):
            # the loss at which the scale crosses 2^j: ref/2^j (ε) or (ref/2^j)² (ρ)
            def at(k: int, ref: Fraction = ref) -> Fraction:
                crossing = ref / Fraction(2) ** k
                return crossing if measure is Measure.PURE else crossing * crossing

            k = math.floor(math.log2(ref / high)) - 1 if measure is Measure.PURE else -200
            while (cut := at(k)) > low:
                if cut <= high:
                    cuts.append(cut)
                k += 1
    return sorted(set(cuts))


def _unit(value: Fraction) -> Fraction:
    """10^(k-5) for 10^k ≤ value < 10^(k+1): the step of six significant digits."""
    k = len(str(value.numerator // value.denominator)) - 1 if value >= 1 else -_leading(value)
    return Fraction(10) ** (k - SIGNIFICANT_DIGITS + 1)


def _leading(value: Fraction) -> int:
    """For 0 < value < 1: j with 10^-j ≤ value < 10^-(j-1)."""
    j = 1
    while value * 10**j < 1:
        j += 1
    return j


def _smallest(
    meets: Callable[[Fraction], bool],
    low: Fraction,
    high: Fraction,
    unit: Fraction,
    cuts: list[Fraction],
) -> Fraction:
    """The smallest multiple of `unit` in (low, high] with `meets`, given that `meets(high)`
    holds and `meets` is monotone on each range (a, b] between consecutive cuts."""
    edges = [low, *(c for c in cuts if low < c < high), high]
    for a, b in zip(edges, edges[1:], strict=False):
        bottom, top = math.floor(a / unit), math.floor(b / unit)
        if top <= bottom or not meets(top * unit):
            continue
        while top - bottom > 1:  # meets(top · unit), not meets at bottom (or bottom = a)
            middle = (bottom + top) // 2
            if meets(middle * unit):
                top = middle
            else:
                bottom = middle
        return top * unit
    raise AssertionError("meets(high) holds, so the last range has a smallest multiple")
