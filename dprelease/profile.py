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
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dprelease.errors import ConfigError, ProfileError

GROUP_SIZES = (1, 2, 3, 4, 5)


class Neighbours(StrEnum):
    """Which datasets DP treats as neighbours; it sets how ε maps to an odds factor."""

    ADD_REMOVE = "add_remove"
    SUBSTITUTE = "substitute"

    @property
    def odds_exponent(self) -> int:
        """k in the likelihood-ratio bound e^{kε} for a change of Y_i (Kazan & Reiter, Lemma 1)."""
        return 2 if self is Neighbours.ADD_REMOVE else 1

    def epsilon_for_bound(self, bound: ArrayLike) -> NDArray[np.float64]:
        """ε_P10: the largest ε whose odds factor stays within `bound` (paper eq. 16)."""
        return np.log(np.asarray(bound, dtype=float)) / self.odds_exponent

    def odds_factor(self, epsilon: float) -> float:
        """The most an ε-DP release can multiply a posterior odds ratio."""
        return math.exp(self.odds_exponent * epsilon)


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


class PiecewiseLinearProfile(OddsRiskProfile):
    """Linear between (P10, B) points, constant outside them (the paper's Figure 1 shape)."""

    kind = "piecewise_linear"

    def __init__(self, points: Sequence[Sequence[float]]) -> None:
        self.p10, self.bounds = _validated_points(points, self.kind, fewest=2)

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

    def breakpoints(self) -> NDArray[np.float64]:
        return self.p10.copy()

    def describe(self) -> dict[str, Any]:
        points = [[float(p), float(b)] for p, b in zip(self.p10, self.bounds, strict=True)]
        return {"kind": self.kind, "points": points}


class StepProfile(OddsRiskProfile):
    """B_j on [P10_j, P10_{j+1}): each breakpoint belongs to the step on its right."""

    kind = "step"

    def __init__(self, points: Sequence[Sequence[float]]) -> None:
        self.starts, self.bounds = _validated_points(points, self.kind, fewest=1)

    def bound(self, p10: ArrayLike) -> NDArray[np.float64]:
        step = np.searchsorted(self.starts, _as_p10(p10), side="right") - 1
        return self.bounds[np.clip(step, 0, None)]

    def minimum(self) -> ProfileMinimum:
        # Every step covers a non-empty interval of P10 > 0, so its value is attained.
        first = int(np.argmin(self.bounds))
        p10 = 0.0 if first == 0 else float(self.starts[first])
        return ProfileMinimum(float(self.bounds[first]), p10, attained=True)

    def breakpoints(self) -> NDArray[np.float64]:
        return self.starts.copy()

    def describe(self) -> dict[str, Any]:
        points = [[float(p), float(b)] for p, b in zip(self.starts, self.bounds, strict=True)]
        return {"kind": self.kind, "points": points}


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


def _as_list(profiles: Profiles) -> list[OddsRiskProfile]:
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
    profiles: Profiles, neighbours: Neighbours = Neighbours.ADD_REMOVE
) -> EpsilonMinimum:
    """The largest ε that honours every profile: log is increasing, so it sits at min B."""
    listed = _as_list(profiles)
    minima = [profile.minimum() for profile in listed]
    index = min(range(len(minima)), key=lambda i: minima[i].bound)
    lowest = minima[index]
    return EpsilonMinimum(
        epsilon=float(neighbours.epsilon_for_bound(lowest.bound)),
        p10=lowest.p10,
        bound=lowest.bound,
        attained=lowest.attained,
        profile_index=index,
    )


def as_decimal(step: float | str | Decimal) -> Decimal:
    """The decimal a user wrote: a float is read by its shortest repr (0.05, not 0.05000…03)."""
    try:
        exact = Decimal(repr(step)) if isinstance(step, float) else Decimal(step)
    except InvalidOperation:
        exact = Decimal("NaN")
    if not exact.is_finite():
        raise ConfigError("rounding", f"the rounding step must be a finite number, got {step}")
    return exact


def round_down(epsilon: float, step: float | str | Decimal) -> float:
    """The largest multiple of `step` that is ≤ `epsilon` as a float, never above it.

    `step` is read as the decimal the user wrote (0.05, not its binary neighbour) and the grid is
    walked in exact rationals, so float artefacts like 3 × 0.1 = 0.30000000000000004 cannot round
    an ε up past what the profile allows.
    """
    exact_step = Fraction(as_decimal(step))
    if not (exact_step > 0 and math.isfinite(epsilon) and epsilon >= 0):
        raise ConfigError("rounding", f"need a step > 0 and a finite ε ≥ 0, got {step}, {epsilon}")
    multiples = math.floor(Fraction(epsilon) / exact_step)
    if float((multiples + 1) * exact_step) <= epsilon:  # the grid value is ε itself as a float
        multiples += 1
    return float(multiples * exact_step)


def prior_odds_ratio(q: float, q0: float) -> float:
    """P10 = (q / (1 − q)) · ((1 − q0) / q0): prior odds of Y ∈ S in the data over out of it."""
    return (q / (1 - q)) * ((1 - q0) / q0)


@dataclass(frozen=True)
class Adversary:
    """A named adversary by its priors q = P[Y∈S | in data] and q0 = P[Y∈S | not in data]."""

    name: str
    q: float
    q0: float

    def __post_init__(self) -> None:
        for field, value in (("q", self.q), ("q0", self.q0)):
            if not (math.isfinite(value) and 0 < value < 1):
                raise ConfigError(
                    field,
                    f"{field} = {value} is not a probability strictly between 0 and 1; "
                    "at 0 or 1 the prior odds ratio is 0 or infinite",
                )

    @property
    def p10(self) -> float:
        return prior_odds_ratio(self.q, self.q0)


@dataclass(frozen=True)
class AdversaryRow:
    """What the profile allows one adversary and what the chosen ε actually lets it reach."""

    name: str
    q: float
    q0: float
    p10: float
    bound: float
    epsilon: float
    max_posterior_odds_ratio: float


@dataclass(frozen=True)
class GroupPrivacyRow:
    """A household of k people is protected at kε (Dwork & Roth, Thm 2.2)."""

    k: int
    epsilon: float
    odds_factor: float


def adversary_rows(
    profiles: Profiles,
    adversaries: Sequence[Adversary],
    epsilon: float,
    neighbours: Neighbours = Neighbours.ADD_REMOVE,
) -> list[AdversaryRow]:
    """Per adversary: B(P10) (the strictest profile's), ε_P10, and the odds ratio ε allows."""
    listed = _as_list(profiles)
    rows = []
    for adversary in adversaries:
        p10 = adversary.p10
        bound = min(float(profile.bound(p10)) for profile in listed)
        rows.append(
            AdversaryRow(
                name=adversary.name,
                q=adversary.q,
                q0=adversary.q0,
                p10=p10,
                bound=bound,
                epsilon=float(neighbours.epsilon_for_bound(bound)),
                max_posterior_odds_ratio=neighbours.odds_factor(epsilon) * p10,
            )
        )
    return rows


def group_privacy(
    epsilon: float,
    neighbours: Neighbours = Neighbours.ADD_REMOVE,
    sizes: Sequence[int] = GROUP_SIZES,
) -> list[GroupPrivacyRow]:
    """kε and its odds factor for groups of k people who may all be in the data."""
    return [GroupPrivacyRow(k, k * epsilon, neighbours.odds_factor(k * epsilon)) for k in sizes]


@dataclass(frozen=True)
class BudgetChoice:
    """Everything a steward needs to justify the ε a release uses."""

    epsilon_min: float
    epsilon: float
    argmin_p10: float
    bound_at_argmin: float
    argmin_attained: bool
    profile_index: int
    neighbours: Neighbours
    rounding: str | None
    adversaries: tuple[AdversaryRow, ...]
    group_privacy: tuple[GroupPrivacyRow, ...]
    profiles: tuple[OddsRiskProfile, ...]
    prior_risk_epsilon: float | None = None

    def to_json_dict(self) -> dict[str, Any]:
        """Plain JSON types only; the CLI's `--json` output and release manifests use it."""
        return {
            "epsilon_min": self.epsilon_min,
            "epsilon": self.epsilon,
            "argmin_p10": self.argmin_p10,
            "bound_at_argmin": self.bound_at_argmin,
            "argmin_attained": self.argmin_attained,
            "profile_index": self.profile_index,
            "neighbours": self.neighbours.value,
            "rounding": self.rounding,
            "adversaries": [vars(row).copy() for row in self.adversaries],
            "group_privacy": [vars(row).copy() for row in self.group_privacy],
            "profiles": [profile.describe() for profile in self.profiles],
            "prior_risk_epsilon": self.prior_risk_epsilon,
        }


def choose_budget_for(
    profiles: Profiles,
    *,
    neighbours: Neighbours = Neighbours.ADD_REMOVE,
    adversaries: Sequence[Adversary] = (),
    rounding: float | str | Decimal | None = None,
    prior_risk_epsilon: float | None = None,
) -> BudgetChoice:
    """ε_min over all profiles, rounded down if asked, with the tables that explain it.

    `prior_risk_epsilon` (the companion posterior-to-prior selector), when configured, must hold
    too: `epsilon` is then the smaller of the two before rounding, and `epsilon_min` stays the
    odds profile's own minimum so both are visible.
    """
    listed = _as_list(profiles)
    lowest = epsilon_min(listed, neighbours)
    if lowest.epsilon <= 0:
        raise ProfileError(
            f"profiles[{lowest.profile_index}]" if len(listed) > 1 else "profile",
            f"B = 1 at P10 = {lowest.p10:g} allows no change in the odds at all, so ε_min = 0 "
            "and nothing can be released; raise B above 1 there",
        )
    binding = (
        lowest.epsilon if prior_risk_epsilon is None else min(lowest.epsilon, prior_risk_epsilon)
    )
    epsilon = binding
    rounding_text = None
    if rounding is not None:
        epsilon = round_down(binding, rounding)
        rounding_text = str(as_decimal(rounding))
        if epsilon <= 0:
            raise ConfigError(
                "rounding",
                f"rounding down ε = {binding:.6g} to a multiple of {rounding_text} "
                "gives 0; use a smaller step or leave rounding out",
            )
    return BudgetChoice(
        epsilon_min=lowest.epsilon,
        epsilon=epsilon,
        argmin_p10=lowest.p10,
        bound_at_argmin=lowest.bound,
        argmin_attained=lowest.attained,
        profile_index=lowest.profile_index,
        neighbours=neighbours,
        rounding=rounding_text,
        adversaries=tuple(adversary_rows(listed, adversaries, epsilon, neighbours)),
        group_privacy=tuple(group_privacy(epsilon, neighbours)),
        profiles=tuple(listed),
        prior_risk_epsilon=prior_risk_epsilon,
    )


#: A profile's ε is a float computed through logarithms (and square roots for the companion
#: selector); 2^-40 ≈ 9.1e-13 is far above that computation's error, so a value at least this far
#: below the float lies below the true ε.
PROFILE_EPSILON_MARGIN = Fraction(1, 2**40)
#: Caps from a profile without a rounding step are multiples of this.
CAP_RESOLUTION = Fraction(1, 10**12)


def cap_from_profile(choice: BudgetChoice) -> Fraction:
    """The exact budget cap a profile allows, rounded DOWN, never up.

    ε from a profile is a float that can exceed the true ε_min by an ulp, and the decimal it
    prints as can exceed it too. The cap is the largest multiple of the profile's rounding step
    (else of 10^-12) at least `PROFILE_EPSILON_MARGIN` below the float, so 0.30 with
    `rounding: 0.05` stays exactly 3/10 and ½·ln 2 becomes 0.346573590279.
    """
    binding = choice.epsilon_min
    if choice.prior_risk_epsilon is not None:
        binding = min(binding, choice.prior_risk_epsilon)
    step = CAP_RESOLUTION if choice.rounding is None else Fraction(as_decimal(choice.rounding))
    cap = math.floor((Fraction(binding) - PROFILE_EPSILON_MARGIN) / step) * step
    if cap <= 0:
        raise ConfigError(
            "rounding" if choice.rounding is not None else "profile",
            f"ε = {binding:.3g} from the profile rounds down to a cap of 0 at a resolution of "
            f"{float(step):g}; use a smaller rounding step or a profile that allows more",
        )
    return cap
