"""The inverse of a plan: the smallest ε (ρ) at which every target margin is met, exactly as
the release at that loss states it.

The margins are the exact 95% quantiles of the discrete noise at the sampled (rounded-up) scale,
in units of the granularity, not the continuous Δ·ln(20)/ε. Within a range of ε where no
automatic granularity changes, every margin shrinks as ε grows, so bisection finds the smallest
ε there; where a granularity halves a margin can step up by about 2^-21 of itself, so the search
visits those ranges in order and returns the first that meets every target. The answer is a
decimal: the smallest multiple of 10^(k-5) that meets every target, where 10^k ≤ ε < 10^(k+1)
(six significant digits).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from fractions import Fraction

from dprelease.change import ProtectedChange
from dprelease.errors import SpecError
from dprelease.loss import Measure, Mechanism, PrivacyLoss
from dprelease.mechanism import (
    LN_20,
    allocate,
    granularity_references,
    rows_reach,
    sensitivity_bound,
)
from dprelease.spec import ReleaseSpec, ResolvedSpec, StatisticModel
from dprelease.statement._entries import planned_entries

SIGNIFICANT_DIGITS = 6
_MAX_DOUBLINGS = 200


def epsilon_for_targets(
    resolved: ResolvedSpec,
    targets: Mapping[str, float],
    neighbours: ProtectedChange,
    measure: Measure = Measure.PURE,
    mechanism: Mechanism = Mechanism.LAPLACE,
) -> Fraction:
    """The smallest ε (ρ under zCDP; six significant digits) at which every target margin is
    met, exactly as the release at that loss states it (the module docstring says how)."""
    spec = resolved.spec

    @functools.cache  # the search asks some ε twice (a range's ends, refinement passes)
    def meets(epsilon: Fraction) -> bool:
        try:
            planned = allocate(resolved, PrivacyLoss(measure, epsilon), neighbours, mechanism)
        except SpecError:  # e.g. a noise scale the sampler cannot draw: not a usable ε
            return False
        entries = planned_entries(planned, spec.postprocess, resolved, targets)
        margin = {e.name: getattr(e, "moe95", None) for e in entries}  # a targeted kind's
        return all(
            (moe := margin[name]) is not None and moe <= target for name, target in targets.items()
        )

    low = (
        _lower_bound(resolved, targets, neighbours)
        if measure is Measure.PURE
        else Fraction(1, 10**12)  # the doubling below finds the range in ~40 steps
    )
    while meets(low):  # a guard: against float rounding, and the margins' heuristic bound
        low /= 2
    high = low
    for _ in range(_MAX_DOUBLINGS):
        if meets(high):
            break
        high *= 2
    else:
        raise SpecError("target", "no ε meets these targets; loosen them or the bounds")
    unit = _unit(high)
    high = math.ceil(high / unit) * unit
    while not meets(high):  # rounding up to the grid crossed a granularity change
        high += unit
    cuts = _granularity_cuts(resolved, targets, neighbours, low, high, measure, mechanism)
    found = _smallest(meets, low, high, unit, cuts)
    while _unit(found) < unit:  # a lower decade: one more digit there
        unit = _unit(found)
        found = _smallest(meets, max(low, found - 10 * unit), found, unit, cuts)
    return found


def _lower_bound(
    resolved: ResolvedSpec, targets: Mapping[str, float], neighbours: ProtectedChange
) -> Fraction:
    """An ε below which no target can be met. The exact margin is h·g with h ≥ b·ln 20 − 1 and
    b ≥ Δ/ε_j (Δ in units of g, at least (Δ_bound − reach·g/2)/g once the bounds are rounded to
    units), so meeting T needs ε_j ≥ (Δ_bound − reach·g/2)·ln 20 / (T + g). An automatic g is
    far below T, so T stands in for it. With margins ε_j is the statistic's ε over all its
    levels, as if the cells had it all: a heuristic (the consistent cells draw on every level,
    each measured with less), which the search checks by halving."""
    spec = resolved.spec
    share = _shares(resolved, neighbours)
    bounds = [Fraction(1, 10**12)]
    for stat in _targeted(spec, targets):
        target = Fraction(targets[stat.name])
        value = stat.row_value(spec)
        if value is None:  # a count of rows: integers, without a granularity
            slack, rounding = Fraction(1), Fraction(0)
        else:
            granularity = value.granularity
            slack = target if granularity is None else Fraction(granularity)
            rounding = rows_reach(spec, neighbours) * slack / 2
        delta = max(sensitivity_bound(stat, spec, neighbours) - rounding, Fraction(0))
        need = delta * Fraction(LN_20) * Fraction(1023, 1024) / (target + slack)
        bounds.append(need / share[stat.name])
    return max(bounds)


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
