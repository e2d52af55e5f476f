"""Odds risk profiles B(P10) and the privacy budget they imply (odds-risk-profile paper eq. 16).

A profile says, for every adversary prior odds ratio P10 > 0, by how much a release may multiply
that adversary's posterior odds ratio. Under ε-DP the factor is at most e^{2ε} (add/remove
neighbours: changing Y_i is a removal plus an addition) or e^{ε} (substitute neighbours), so each
P10 allows ε_P10 = log B(P10) / 2 (or / 1) and a release that honours the whole profile must use
ε_min = inf over P10 > 0 of ε_P10.

Profile shapes (all constant before their first point when it sits at P10 > 0, and after the last):
- `PiecewiseLinearProfile`: linear between points; a first point at P10 = 0 is the limit P10 → 0⁺.
- `StepProfile`: each point (P10_j, B_j) starts a step, B = B_j on [P10_j, P10_{j+1}); a
  breakpoint belongs to the step on its right (B is right-continuous).
- `ConstantProfile`: one bound for every P10.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dprelease.change import ProtectedChange
from dprelease.errors import ProfileError


def epsilon_for_bound(change: ProtectedChange, bound: ArrayLike) -> NDArray[np.float64]:
    """ε_P10: the largest ε whose odds factor e^{kε} stays within `bound` (paper eq. 16), k the
    value-change group of the protected change."""
    return np.log(np.asarray(bound, dtype=float)) / change.value_change_group


def odds_factor(change: ProtectedChange, epsilon: float) -> float:
    """The most an ε-DP release can multiply a posterior odds ratio: e^{kε}."""
    return math.exp(change.value_change_group * epsilon)


@dataclass(frozen=True)
class ProfileMinimum:
    """Where B reaches its infimum.

    `p10` is the smallest P10 in the closure [0, ∞) of the set where B equals the infimum; 0.0
    stands for the limit P10 → 0⁺. `attained` says whether some P10 > 0 actually reaches it
    (False when the infimum is only approached as P10 → 0).
    """

    bound: float
    p10: float
    attained: bool


class OddsRiskProfile(ABC):
    """B(P10) ≥ 1: the factor a release may apply to the posterior odds ratio at prior P10."""

    kind: ClassVar[str]

    @abstractmethod
    def bound(self, p10: ArrayLike) -> NDArray[np.float64]:
        """B at each P10 (vectorized; P10 = 0 means the limit from the right)."""

    @abstractmethod
    def minimum(self) -> ProfileMinimum:
        """The exact infimum of B over P10 > 0, without a grid search."""

    @abstractmethod
    def breakpoints(self) -> NDArray[np.float64]:
        """P10 values where the shape changes; plots sample them so kinks are drawn exactly."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """The profile as plain data, in the same form as the YAML `profile:` section."""


def _validated_points(
    points: Sequence[Sequence[float]], kind: str, fewest: int
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Check (P10, B) points and return them as two arrays; errors name the offending point."""
    if len(points) < fewest:
        raise ProfileError(
            "points",
            f"a {kind} profile needs at least {fewest} point(s) (P10, B), got {len(points)}"
            + ("; use kind: constant for a single bound" if fewest > 1 else ""),
        )
    previous: float | None = None
    for index, point in enumerate(points):
        where = f"points[{index}]"
        if len(point) != 2:
            raise ProfileError(where, f"a point is a pair [P10, B], got {len(point)} value(s)")
        p10, bound = float(point[0]), float(point[1])
        if not (math.isfinite(p10) and math.isfinite(bound)):
            raise ProfileError(
                where,
                f"P10 = {p10}, B = {bound} is not finite; use finite numbers "
                "(the last point's B already holds for every larger P10)",
            )
        if p10 < 0:
            raise ProfileError(where, f"P10 = {p10} is negative; prior odds ratios are ≥ 0")
        if previous is not None and p10 <= previous:
            raise ProfileError(
                where,
                f"P10 = {p10} is not greater than the previous point's P10 = {previous}; "
                "list points in strictly increasing P10 without duplicates",
            )
        if bound < 1:
            raise ProfileError(
                where,
                f"B = {bound} < 1 would require the release to shrink the adversary's odds, "
                "which no ε > 0 guarantees; raise B to at least 1",
            )
        previous = p10
    array = np.asarray(points, dtype=float)
    return array[:, 0].copy(), array[:, 1].copy()


def _as_p10(p10: ArrayLike) -> NDArray[np.float64]:
    values = np.asarray(p10, dtype=float)
    if np.any(np.isnan(values)) or np.any(values < 0):
        raise ProfileError("p10", "prior odds ratios P10 must be ≥ 0 and not NaN")
    return values


class _PointsProfile(OddsRiskProfile):
    """A profile given by (P10, B) points, as the YAML `points:` states them: checked, plotted
    at and described by its points alike, whatever shape it draws between them."""

    fewest_points: ClassVar[int]

    def __init__(self, points: Sequence[Sequence[float]]) -> None:
        self.p10, self.bounds = _validated_points(points, self.kind, fewest=self.fewest_points)

    def breakpoints(self) -> NDArray[np.float64]:
        return self.p10.copy()

    def describe(self) -> dict[str, Any]:
        points = [[float(p), float(b)] for p, b in zip(self.p10, self.bounds, strict=True)]
        return {"kind": self.kind, "points": points}


class PiecewiseLinearProfile(_PointsProfile):
    """Linear between (P10, B) points, constant outside them (the paper's Figure 1 shape)."""

    kind = "piecewise_linear"
    fewest_points = 2

    def bound(self, p10: ArrayLike) -> NDArray[np.float64]:
        return np.interp(_as_p10(p10), self.p10, self.bounds)

    def minimum(self) -> ProfileMinimum:
        # Each linear piece has its extremes at its ends, so the infimum is a vertex value.
        first = int(np.argmin(self.bounds))
        lowest = float(self.bounds[first])
        if first > 0:
            return ProfileMinimum(lowest, float(self.p10[first]), attained=True)
        flat_from_zero = self.p10[0] > 0 or self.bounds[1] == lowest
        return ProfileMinimum(lowest, 0.0, attained=bool(flat_from_zero))


class StepProfile(_PointsProfile):
    """B_j on [P10_j, P10_{j+1}): each breakpoint belongs to the step on its right."""

    kind = "step"
    fewest_points = 1

    def bound(self, p10: ArrayLike) -> NDArray[np.float64]:
        step = np.searchsorted(self.p10, _as_p10(p10), side="right") - 1
        return self.bounds[np.clip(step, 0, None)]

    def minimum(self) -> ProfileMinimum:
        # Every step covers a non-empty interval of P10 > 0, so its value is attained.
        first = int(np.argmin(self.bounds))
        p10 = 0.0 if first == 0 else float(self.p10[first])
        return ProfileMinimum(float(self.bounds[first]), p10, attained=True)


class ConstantProfile(OddsRiskProfile):
    """The same tolerated factor for every adversary."""

    kind = "constant"

    def __init__(self, bound: float) -> None:
        value = float(bound)
        if not math.isfinite(value) or value < 1:
            raise ProfileError("bound", f"B = {value} must be a finite number ≥ 1")
        self.value = value

    def bound(self, p10: ArrayLike) -> NDArray[np.float64]:
        return np.full_like(_as_p10(p10), self.value, dtype=float)

    def minimum(self) -> ProfileMinimum:
        return ProfileMinimum(self.value, 0.0, attained=True)

    def breakpoints(self) -> NDArray[np.float64]:
        return np.empty(0)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "bound": self.value}


Profiles = OddsRiskProfile | Sequence[OddsRiskProfile]


def as_profile_list(profiles: Profiles) -> list[OddsRiskProfile]:
    listed = [profiles] if isinstance(profiles, OddsRiskProfile) else list(profiles)
    if not listed:
        raise ProfileError("profiles", "give at least one odds risk profile")
    return listed


@dataclass(frozen=True)
class EpsilonMinimum:
    """ε_min and where it is reached; `profile_index` picks the binding individual profile."""

    epsilon: float
    p10: float
    bound: float
    attained: bool
    profile_index: int


def epsilon_min(
    profiles: Profiles, neighbours: ProtectedChange = ProtectedChange.ADD_REMOVE
) -> EpsilonMinimum:
    """The largest ε that honours every profile: log is increasing, so it sits at min B."""
    listed = as_profile_list(profiles)
    minima = [profile.minimum() for profile in listed]
    index = min(range(len(minima)), key=lambda i: minima[i].bound)
    lowest = minima[index]
    return EpsilonMinimum(
        epsilon=float(epsilon_for_bound(neighbours, lowest.bound)),
        p10=lowest.p10,
        bound=lowest.bound,
        attained=lowest.attained,
        profile_index=index,
    )
