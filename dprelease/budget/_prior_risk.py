"""Companion selector: ε from a posterior-to-prior relative risk profile (Kazan & Reiter 2024).

The steward bounds r*(p, q) > 1, how many times an adversary's posterior probability that person i
is in the data with Y_i ∈ S may exceed its prior p·q (p: prior inclusion probability, q: prior
P[Y_i ∈ S]). Their Theorem 2 (add/remove neighbours) gives the largest ε honouring the bound at
(p, q), with u = 1/r* − p·q:

    q < 1:  ε(p, q) = log( 2p(1−q) / ( sqrt((1−p)² + 4p(1−q)u) − (1−p) ) )
    q = 1:  ε(p, 1) = log( (1−p) / u )

We evaluate the equal form log( (sqrt((1−p)² + 4p(1−q)u) + (1−p)) / (2u) ) (multiply through by
the conjugate): it has no 0/0 at q = 1 or p → 0 and is the q = 1 formula there. Where u ≤ 0 the
bound is vacuous, since a posterior never exceeds 1, i.e. never exceeds 1/(p·q) times the prior:
ε(p, q) = +∞. The selector's ε is the infimum over the profile's (p, q) domain; the edges p → 0
and q → 0 are included as limits, where the formula is continuous.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dprelease.errors import ConfigError

_GOLDEN = (math.sqrt(5) - 1) / 2
_GRID = np.unique(np.concatenate([[0.0], np.logspace(-12, 0, 1201), np.linspace(0, 1, 4001)]))


def theorem2_epsilon(p: ArrayLike, q: ArrayLike, inverse_bound: ArrayLike) -> NDArray[np.float64]:
    """ε(p, q) of Theorem 2 given 1/r*(p, q), vectorized; +∞ where the bound is vacuous."""
    p, q, inverse_bound = (np.asarray(x, dtype=float) for x in (p, q, inverse_bound))
    slack = inverse_bound - p * q
    outside = 1 - p
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (np.sqrt(outside**2 + 4 * p * (1 - q) * slack) + outside) / (2 * slack)
        return np.where(slack > 0, np.log(ratio), np.inf)


@dataclass(frozen=True)
class PriorRiskEpsilon:
    """The selector's ε and the (p, q) that binds; 0.0 there means the limit → 0⁺."""

    epsilon: float
    p: float
    q: float
    closed_form: bool


def _probability(field: str, value: float) -> float:
    if not (math.isfinite(value) and 0 < value <= 1):
        raise ConfigError(field, f"{field} = {value} must be a probability in (0, 1]")
    return float(value)


def _risk_bound(field: str, value: float) -> float:
    if not (math.isfinite(value) and value > 1):
        raise ConfigError(
            field, f"{field} = {value} must be a finite relative risk > 1 (1 forbids any release)"
        )
    return float(value)


def _positive(field: str, value: float) -> float:
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(field, f"{field} = {value} must be a finite number > 0")
    return float(value)


def _minimise_on_unit_interval(
    objective: Callable[[NDArray[np.float64]], NDArray[np.float64]],
) -> tuple[float, float]:
    """(x, f(x)) minimising f on [0, 1]: a dense grid (log-spaced near 0), then golden section
    between the best grid point's neighbours. The objectives here are smooth apart from one kink,
    so this pins ε far below the 1e-4 the selector promises; no SciPy at run time."""
    values = objective(_GRID)
    best = int(np.argmin(values))
    low, high = _GRID[max(best - 1, 0)], _GRID[min(best + 1, len(_GRID) - 1)]
    inner_low, inner_high = high - _GOLDEN * (high - low), low + _GOLDEN * (high - low)
    for _ in range(80):
        if objective(np.array(inner_low)) <= objective(np.array(inner_high)):
            high, inner_high = inner_high, inner_low
            inner_low = high - _GOLDEN * (high - low)
        else:
            low, inner_low = inner_low, inner_high
            inner_high = low + _GOLDEN * (high - low)
    refined = (low + high) / 2
    refined_value = float(objective(np.array(refined)))
    if refined_value < values[best]:
        return float(refined), refined_value
    return float(_GRID[best]), float(values[best])


class RelativeRiskProfile(ABC):
    """r*(p, q) > 1: the tolerated posterior-to-prior ratio at prior inclusion p and prior q."""

    kind: ClassVar[str]

    @abstractmethod
    def inverse_bound(self, p: ArrayLike, q: ArrayLike) -> NDArray[np.float64]:
        """1/r*(p, q), which stays finite where r* grows without bound."""

    @abstractmethod
    def epsilon(self) -> PriorRiskEpsilon:
        """The infimum of Theorem 2's ε(p, q) over the profile's domain."""


@dataclass(frozen=True)
class ConstantRelativeRisk(RelativeRiskProfile):
    """r*(p, q) = r everywhere. Closed form: ε = ½ log r, approached at p = 1, q → 0.

    Why: with s = √r, ε(p, q) ≥ log s ⟺ (s − 1)(1 − p) + p·q·(r − 1) ≥ 0 (square
    sqrt(·) ≥ 2us − (1 − p) and use u = 1/r − pq), which holds for r > 1 with equality only at
    p = 1, q = 0. At the other edge, p → 0, ε → log r, twice as much.
    """

    r: float
    kind: ClassVar[str] = "constant"

    def __post_init__(self) -> None:
        _risk_bound("r", self.r)

    def inverse_bound(self, p: ArrayLike, q: ArrayLike) -> NDArray[np.float64]:
        return np.full(np.broadcast(np.asarray(p), np.asarray(q)).shape, 1 / self.r)

    def epsilon(self) -> PriorRiskEpsilon:
        return PriorRiskEpsilon(0.5 * math.log(self.r), p=1.0, q=0.0, closed_form=True)


@dataclass(frozen=True)
class _FloorRelativeRisk(RelativeRiskProfile):
    """r*(p, q) = max{a/(p·q), r}: looser where the prior p·q is tiny. Its two profiles fix one
    prior and minimise over the other; the bound and its checks are the same."""

    a: float
    r: float

    def __post_init__(self) -> None:
        _positive("a", self.a)
        _risk_bound("r", self.r)

    def inverse_bound(self, p: ArrayLike, q: ArrayLike) -> NDArray[np.float64]:
        return np.minimum(np.asarray(p) * np.asarray(q) / self.a, 1 / self.r)


@dataclass(frozen=True)
class FloorRelativeRiskFixedQ(_FloorRelativeRisk):
    """r*(p) = max{a/(p·q), r} for one fixed prior q; minimised over p (numerically: no closed
    form found)."""

    q: float
    kind: ClassVar[str] = "max_fixed_q"

    def __post_init__(self) -> None:
        super().__post_init__()
        _probability("q", self.q)

    def epsilon(self) -> PriorRiskEpsilon:
        p, value = _minimise_on_unit_interval(
            lambda p: theorem2_epsilon(p, self.q, self.inverse_bound(p, self.q))
        )
        return PriorRiskEpsilon(value, p=p, q=self.q, closed_form=False)


@dataclass(frozen=True)
class FloorRelativeRiskFixedP(_FloorRelativeRisk):
    """r*(q) = max{a/(p·q), r} for one fixed inclusion probability p; minimised over q."""

    p: float
    kind: ClassVar[str] = "max_fixed_p"

    def __post_init__(self) -> None:
        super().__post_init__()
        _probability("p", self.p)

    def epsilon(self) -> PriorRiskEpsilon:
        q, value = _minimise_on_unit_interval(
            lambda q: theorem2_epsilon(self.p, q, self.inverse_bound(self.p, q))
        )
        return PriorRiskEpsilon(value, p=self.p, q=q, closed_form=False)
