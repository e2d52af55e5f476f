"""The noise of one level of one measurement: its mechanism, its sensitivity, its exact noise
parameter, the loss it spends, and what that means for accuracy.

Laplace noise (ε-DP) is calibrated to the L1 sensitivity, b = Δ1/ε; Gaussian noise (ρ-zCDP) to
the L2 sensitivity, σ² = Δ2²/(2ρ) (Canonne, Kamath & Steinke 2020: the discrete Gaussian with
that σ² is Δ2²/(2σ²)-zCDP). A Laplace level in a zCDP scope is charged ρ and calibrated to the
largest ε with ε²/2 ≤ ρ (ε-DP is ε²/2-zCDP). Parameters are exact rationals in integer units of
the granularity, rounded so the noise is never less than the loss allows; the sampler draws
exactly that law, and the margin of error is its exact 95% quantile.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dprelease.errors import NoiseError, SpecError
from dprelease.loss import Mechanism, PrivacyLoss, laplace_epsilon
from dprelease.mechanism.noise import (
    NoiseSource,
    discrete_gaussian,
    discrete_laplace,
    exact_scale,
    exact_sigma2,
    gaussian_law,
    laplace_moe95,
    laplace_variance,
)


@dataclass(frozen=True, order=True)
class NoiseLaw:
    """The noise added to one level: granularity · Z, Z an integer of an exact law.

    What the margins of error and the consistent estimate need of a level, and nothing else:
    the mechanism, its exact parameter (the Laplace scale b, or the Gaussian σ², as the sampler
    uses it) and the granularity. Build one with `NoiseLaw.laplace(scale, granularity)` or
    `NoiseLaw.gaussian(sigma2, granularity)`. Laws are values: equal parameters are equal (and
    hash alike, so margins are computed once per pattern of laws), and they sort by mechanism,
    parameter, granularity.
    """

    kind: Mechanism
    parameter: Fraction  # the Laplace scale b, or the Gaussian σ²
    granularity: Fraction = Fraction(1)

    def __post_init__(self) -> None:
        if not isinstance(self.kind, Mechanism):
            raise ValueError(f"kind must be a Mechanism, got {self.kind!r}")
        if self.kind is Mechanism.LAPLACE:
            parameter = exact_scale(self.parameter)
        else:
            parameter = exact_sigma2(_exact_positive("σ²", self.parameter))
        object.__setattr__(self, "parameter", parameter)
        object.__setattr__(self, "granularity", _exact_positive("granularity", self.granularity))

    @classmethod
    def laplace(cls, scale: float | Fraction, granularity: float | Fraction = 1) -> NoiseLaw:
        """Discrete Laplace noise at `scale` (as `exact_scale` makes it) in units of granularity."""
        return cls(Mechanism.LAPLACE, Fraction(scale), _exact_positive("granularity", granularity))

    @classmethod
    def gaussian(cls, sigma2: float | Fraction, granularity: float | Fraction = 1) -> NoiseLaw:
        """Discrete Gaussian noise with variance parameter σ² in units of granularity."""
        return cls(
            Mechanism.GAUSSIAN,
            _exact_positive("σ²", sigma2),
            _exact_positive("granularity", granularity),
        )

    @property
    def scale(self) -> Fraction:
        """The discrete Laplace scale b (a Gaussian law has σ² instead)."""
        if self.kind is not Mechanism.LAPLACE:
            raise TypeError("a discrete Gaussian law has sigma2, not a scale")
        return self.parameter

    @property
    def sigma2(self) -> Fraction:
        """The discrete Gaussian's σ² (a Laplace law has a scale instead)."""
        if self.kind is not Mechanism.GAUSSIAN:
            raise TypeError("a discrete Laplace law has a scale, not sigma2")
        return self.parameter

    @property
    def variance(self) -> float:
        """Var(granularity · Z) in value units²: for the discrete Gaussian the exact variance
        of Z (slightly below σ²), not σ²."""
        if self.kind is Mechanism.LAPLACE:
            units = laplace_variance(self.parameter)
        else:
            units = gaussian_law(self.parameter).variance
        return units * float(self.granularity) ** 2

    @property
    def moe95(self) -> float:
        """granularity × the smallest integer h with P(|Z| ≤ h) ≥ 0.95: the exact margin of
        error of one draw."""
        if self.kind is Mechanism.LAPLACE:
            units = laplace_moe95(self.parameter)
        else:
            units = gaussian_law(self.parameter).abs_quantile95()
        return units * float(self.granularity)


def _exact_positive(name: str, value: object) -> Fraction:
    """`value` as an exact rational (a float is one: a binary fraction), refused unless it is a
    positive finite number."""
    if isinstance(value, numbers.Rational) and not isinstance(value, bool):
        exact = Fraction(int(value.numerator), int(value.denominator))
    elif isinstance(value, float) and math.isfinite(value):
        exact = Fraction(value)
    else:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    if exact <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return exact


#: Largest sensitivity in integer units. One row moves a sum by at most Δ units, so with fewer
#: than 2^63 rows an Int128 accumulator cannot overflow whatever the data (2^53 · 2^63 < 2^127).
MAX_SENSITIVITY_UNITS = 2**53


@dataclass(frozen=True, kw_only=True)
class LevelNoise:
    """One noisy integer vector's law, in integer units of `granularity`.

    `sensitivity_units` is Δ1 (Laplace's calibration; kept for every level), and for a Gaussian
    level `sensitivity_squared_units` is Δ2² (exact; Δ2 itself is irrational in general).
    `epsilon` is the ε a Laplace level's scale is calibrated to (the loss's own ε in a pure
    scope, the largest ε within its ρ in a zCDP scope); `loss` is what the level is charged."""

    mechanism: Mechanism
    granularity: Fraction  # 1 for counts
    sensitivity_units: int
    sensitivity_squared_units: int | None = None
    derivation: str
    loss: PrivacyLoss
    epsilon: Fraction | None = None  # Laplace only
    scale_units: Fraction | None = None  # Laplace: exact scale b ≥ Δ1/ε
    sigma2_units: Fraction | None = None  # Gaussian: exact σ² ≥ Δ2²/(2ρ)

    @property
    def sensitivity(self) -> float:
        """Δ in the column's units: Δ1 for Laplace, Δ2 for Gaussian."""
        if self.mechanism is Mechanism.GAUSSIAN:
            assert self.sensitivity_squared_units is not None
            return math.sqrt(self.sensitivity_squared_units) * float(self.granularity)
        return float(self.sensitivity_units * self.granularity)

    @property
    def parameter_units(self) -> Fraction:
        """The sampler's exact parameter: the Laplace scale b, or the Gaussian σ²."""
        parameter = self.scale_units if self.mechanism is Mechanism.LAPLACE else self.sigma2_units
        assert parameter is not None
        return parameter

    @property
    def scale(self) -> float:
        """The noise's scale in the column's units: b for Laplace, σ for Gaussian."""
        if self.mechanism is Mechanism.GAUSSIAN:
            return math.sqrt(self.parameter_units) * float(self.granularity)
        return float(self.parameter_units * self.granularity)

    @property
    def law(self) -> NoiseLaw:
        """This level's noise as a law: what margins of error and the consistent estimate use."""
        return NoiseLaw(self.mechanism, self.parameter_units, self.granularity)

    @property
    def moe95(self) -> float:
        """95% margin of error: the half-width h·g of the exact discrete interval."""
        return self.law.moe95

    @property
    def variance(self) -> float:
        """The noise's exact variance in the column's units²."""
        return self.law.variance

    def draw(self, size: int, source: NoiseSource) -> np.ndarray:
        """`size` exact draws of this level's noise, in integer units (int64)."""
        if self.mechanism is Mechanism.GAUSSIAN:
            return discrete_gaussian(self.parameter_units, size, source)
        return discrete_laplace(self.parameter_units, size, source)


def level_noise(
    mechanism: Mechanism,
    loss: PrivacyLoss,
    granularity: Fraction,
    l1: tuple[int, str],
    l2: tuple[int, str],
    path: str,
) -> LevelNoise:
    """The noise of a level spending `loss` with the given L1 (Δ1 units, why) and L2 (Δ2²
    units², why) sensitivities; SpecError naming `path` for a law the sampler cannot draw."""
    delta, derivation = l1
    if delta > MAX_SENSITIVITY_UNITS:
        raise SpecError(
            path,
            f"sensitivity of {delta} units is above 2^53; lower the bounds or "
            "max_rows_per_unit, or choose a coarser 'granularity'",
        )
    squared: int | None = None  # Δ2², Gaussian only
    epsilon: Fraction | None = None  # Laplace only
    scale: Fraction | None = None
    sigma2: Fraction | None = None
    if mechanism is Mechanism.GAUSSIAN:
        squared, derivation = l2  # a Gaussian level is calibrated to, and explained by, Δ2
        sigma2 = _drawable(
            exact_sigma2, Fraction(squared) / (2 * loss.rho), path, "σ² = Δ2²/(2ρ)", "ρ"
        )
    else:
        epsilon = laplace_epsilon(loss)
        if epsilon <= 0:
            raise SpecError(path, "the ρ of this level leaves no ε for Laplace noise; raise ρ")
        scale = _drawable(exact_scale, Fraction(delta) / epsilon, path, "Δ/ε", "ε")
    return LevelNoise(
        mechanism=mechanism,
        granularity=granularity,
        sensitivity_units=delta,
        sensitivity_squared_units=squared,
        derivation=derivation,
        loss=loss,
        epsilon=epsilon,
        scale_units=scale,
        sigma2_units=sigma2,
    )


def _drawable(
    exact: Callable[[Fraction], Fraction], asked: Fraction, path: str, formula: str, raise_: str
) -> Fraction:
    """`exact(asked)`, the sampler's exact parameter for the one the loss asks for; a parameter
    the sampler cannot draw is the spec's problem, so SpecError naming `path` says what to raise
    or lower (the sampler's NoiseError would name no field)."""
    try:
        return exact(asked)
    except NoiseError:
        raise SpecError(
            path,
            f"the noise scale {formula} is beyond what the noise sampler can draw; raise "
            f"{raise_}, or lower the bounds or max_rows_per_unit (or choose a coarser "
            "'granularity')",
        ) from None
