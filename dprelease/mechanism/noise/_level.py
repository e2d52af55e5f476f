"""The noise of one level of one measurement: its family, its sensitivity, its exact noise
parameter, the loss it spends, and what that means for accuracy.

Which family, and how it turns a loss and a sensitivity into its exact parameter, is the
family's (`_laws`); a level only holds the result. Parameters are exact rationals in integer
units of the granularity, rounded so the noise is never less than the loss allows; the sampler
draws exactly that law, and the margin of error is its exact 95% quantile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dprelease.errors import SpecError
from dprelease.loss import Mechanism, PrivacyLoss
from dprelease.mechanism.noise._laws import (
    MAX_SENSITIVITY_UNITS,
    NoiseFamily,
    Sensitivity,
    _exact_positive,
    noise_family,
)
from dprelease.mechanism.noise._source import NoiseSource


@dataclass(frozen=True, order=True)
class NoiseLaw:
    """The noise added to one level: granularity · Z, Z an integer of an exact law.

    What the margins of error and the consistent estimate need of a level, and nothing else:
    the mechanism, its exact parameter (the Laplace scale b, or the Gaussian σ², as the sampler
    uses it) and the granularity. Build one with `NoiseLaw.laplace(scale, granularity)` or
    `NoiseLaw.gaussian(sigma2, granularity)`. Laws are values: equal parameters are equal (and
    hash alike, so margins are computed once per pattern of laws), and they sort by mechanism,
    parameter, granularity, parties.

    `parties` > 1 is distributed noise (a consortium release): Z is the sum of that many iid
    draws of the law, one noise share per site, and its variance and margin of error are the
    sum's exact ones (only a family that `sums_shares` has such a law).
    """

    kind: Mechanism
    parameter: Fraction  # the Laplace scale b, or the Gaussian σ² (of one share)
    granularity: Fraction = Fraction(1)
    parties: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.kind, Mechanism):
            raise ValueError(f"kind must be a Mechanism, got {self.kind!r}")
        object.__setattr__(self, "parameter", self.family.exact(self.parameter))
        object.__setattr__(self, "granularity", _exact_positive("granularity", self.granularity))
        _check_parties(self.family, self.parties)

    @property
    def family(self) -> NoiseFamily:
        return noise_family(self.kind)

    @classmethod
    def laplace(
        cls, scale: float | Fraction, granularity: float | Fraction = 1, parties: int = 1
    ) -> NoiseLaw:
        """Discrete Laplace noise at `scale` (as `exact_scale` makes it) in units of granularity."""
        return cls(
            Mechanism.LAPLACE, Fraction(scale), _exact_positive("granularity", granularity), parties
        )

    @classmethod
    def gaussian(
        cls, sigma2: float | Fraction, granularity: float | Fraction = 1, parties: int = 1
    ) -> NoiseLaw:
        """Discrete Gaussian noise with variance parameter σ² in units of granularity (with
        `parties`: the sum of that many iid shares of σ²)."""
        return cls(
            Mechanism.GAUSSIAN,
            _exact_positive("σ²", sigma2),
            _exact_positive("granularity", granularity),
            parties,
        )

    @property
    def scale(self) -> Fraction:
        """The discrete Laplace scale b (a Gaussian law has σ² instead)."""
        return self._parameter("scale")

    @property
    def sigma2(self) -> Fraction:
        """The discrete Gaussian's σ² (a Laplace law has a scale instead)."""
        return self._parameter("sigma2")

    def _parameter(self, name: str) -> Fraction:
        family = self.family
        if family.parameter_name != name:
            words = {"scale": "a scale", "sigma2": "sigma2"}
            raise TypeError(
                f"a {family.name} law has {words[family.parameter_name]}, not {words[name]}"
            )
        return self.parameter

    @property
    def variance(self) -> float:
        """Var(granularity · Z) in value units²: for the discrete Gaussian the exact variance
        of Z (slightly below σ²), not σ²; of a sum of shares, the sum of theirs."""
        return self.parties * self.family.variance(self.parameter) * float(self.granularity) ** 2

    @property
    def moe95(self) -> float:
        """granularity × the smallest integer h with P(|Z| ≤ h) ≥ 0.95: the exact margin of
        error of one draw (or of the sum of the parties' shares)."""
        return self.family.summed_moe95(self.parameter, self.parties) * float(self.granularity)


def _check_parties(family: NoiseFamily, parties: int) -> None:
    """A sum of noise shares only of a family whose shares are drawn and summed exactly."""
    if isinstance(parties, bool) or not isinstance(parties, int) or parties < 1:
        raise ValueError(f"parties must be a positive integer, got {parties!r}")
    if parties > 1 and not family.sums_shares:
        raise ValueError(f"{family.name} noise is not split into shares")


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
    sigma2_units: Fraction | None = None  # Gaussian: exact σ² ≥ Δ2²/(2ρ) (of one share)
    parties: int = 1  # distributed noise: the sum of this many iid shares (`NoiseLaw`)

    def __post_init__(self) -> None:
        _check_parties(self.family, self.parties)

    @property
    def family(self) -> NoiseFamily:
        return noise_family(self.mechanism)

    @property
    def sensitivity(self) -> float:
        """Δ in the column's units: Δ1 for Laplace, Δ2 for Gaussian."""
        return self.family.sensitivity(self)

    @property
    def parameter_units(self) -> Fraction:
        """The sampler's exact parameter: the Laplace scale b, or the Gaussian σ²."""
        parameter = self.scale_units or self.sigma2_units
        if parameter is None:
            raise ValueError("a level without a noise parameter")  # `level_noise` sets one
        return parameter

    @property
    def scale(self) -> float:
        """The noise's scale in the column's units: b for Laplace, σ for Gaussian (of the sum of
        the shares: σ√parties)."""
        return self.family.scale(self.parameter_units, self.granularity) * math.sqrt(self.parties)

    @property
    def law(self) -> NoiseLaw:
        """This level's noise as a law: what margins of error and the consistent estimate use."""
        return NoiseLaw(self.mechanism, self.parameter_units, self.granularity, self.parties)

    @property
    def moe95(self) -> float:
        """95% margin of error: the half-width h·g of the exact discrete interval."""
        return self.law.moe95

    @property
    def variance(self) -> float:
        """The noise's exact variance in the column's units²."""
        return self.law.variance

    def draw(self, size: int, source: NoiseSource) -> np.ndarray:
        """`size` exact draws of this level's noise, in integer units (int64): with parties,
        each the sum of that many shares (as the sites of a consortium draw them)."""
        total = self.family.draw(self.parameter_units, size, source)
        for _ in range(self.parties - 1):
            total = total + self.family.draw(self.parameter_units, size, source)
        return total


def level_noise(
    mechanism: Mechanism,
    loss: PrivacyLoss,
    granularity: Fraction,
    l1: tuple[int, str],
    l2: Sensitivity,
    path: str,
) -> LevelNoise:
    """The noise of a level spending `loss` with the given L1 sensitivity (Δ1 units, why) and,
    computed only for a family calibrated to it, L2 (Δ2² units², why); SpecError naming `path`
    for a law the sampler cannot draw."""
    delta, _ = l1
    if delta > MAX_SENSITIVITY_UNITS:
        raise SpecError(
            path,
            f"sensitivity of {delta} units is above 2^53; lower the bounds or "
            "max_rows_per_unit, or choose a coarser 'granularity'",
        )
    return LevelNoise(
        mechanism=mechanism,
        granularity=granularity,
        sensitivity_units=delta,
        loss=loss,
        **noise_family(mechanism).calibrate(loss, l1, l2, path),
    )
