"""Noise families: each exact integer noise law the library adds, with everything the rest of the
library needs of it, so nothing outside this module asks which law it holds.

A family pairs, as OpenDP pairs a scale with its accuracy, how a share of the loss and a
sensitivity make its exact parameter (`calibrate`; `need`, the inverse for a target margin),
how it is drawn, its variance and 95% margin of error, its floating-point numerics for the
margins of error of a consistent table, and its words in a manifest. Which family a release
uses is one rule, as in Tumult Analytics: the mechanism the budget decided (Laplace for pure
ε-DP, Gaussian for ρ-zCDP unless the spec says Laplace) names it (`noise_family`).

- Discrete Laplace (ε-DP): calibrated to the L1 sensitivity, b = Δ1/ε; in a zCDP scope at the
  largest ε with ε²/2 ≤ ρ (ε-DP is ε²/2-zCDP).
- Discrete Gaussian (ρ-zCDP): calibrated to the L2 sensitivity, σ² = Δ2²/(2ρ) (Canonne, Kamath &
  Steinke 2020: the discrete Gaussian with that σ² is Δ2²/(2σ²)-zCDP).

A new family (a noise share, say) is one more `NoiseFamily` here and one entry in `FAMILIES`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any, Protocol

import numpy as np

from dprelease.errors import NoiseError, SpecError
from dprelease.loss import (
    Measure,
    Mechanism,
    PrivacyLoss,
    exact_rational,
    laplace_epsilon,
    zcdp_of_pure,
)
from dprelease.mechanism.noise._distributed import summed_gaussian_moe95
from dprelease.mechanism.noise._gaussian import discrete_gaussian, exact_sigma2
from dprelease.mechanism.noise._gaussian_law import DiscreteGaussian, gaussian_law
from dprelease.mechanism.noise._laplace import (
    discrete_laplace,
    exact_scale,
    laplace_moe95,
    laplace_variance,
)
from dprelease.mechanism.noise._laplace_law import (
    laplace_k4_z,
    laplace_log_cf,
    laplace_log_mgf,
    laplace_var_z,
)
from dprelease.mechanism.noise._source import NoiseSource

#: Largest sensitivity in integer units. One row moves a sum by at most Δ units, so with fewer
#: than 2^63 rows an Int128 accumulator cannot overflow whatever the data (2^53 · 2^63 < 2^127).
MAX_SENSITIVITY_UNITS = 2**53
#: P(|Laplace| > t) = exp(-t/b): the 95% half-width of Laplace(b) is b·ln(20).
LN_20 = math.log(20)
#: z of the normal 97.5% quantile: a Gaussian's 95% margin is about z·σ.
_Z95 = Fraction(196, 100)

LAPLACE_TEXT = (
    "discrete Laplace (geometric) mechanism, exact sampling after Canonne, Kamath & "
    "Steinke 2020, integer arithmetic, OS CSPRNG bits"
)
GAUSSIAN_TEXT = (
    "discrete Gaussian mechanism, exact sampling after Canonne, Kamath & Steinke 2020 "
    "(Algorithm 3), integer arithmetic, OS CSPRNG bits; σ² = Δ2²/(2ρ) is ρ-zCDP"
)
LAPLACE_IN_ZCDP_TEXT = (
    LAPLACE_TEXT + "; in a zCDP scope, at the largest ε with ε²/2 ≤ ρ (ε-DP is ε²/2-zCDP)"
)


class Calibrated(Protocol):
    """What a family reads of a calibrated level (`_level.LevelNoise`, which builds on the
    families, so this module names it only by its shape): the sensitivity it was calibrated to
    and the exact parameter `calibrate` made."""

    @property
    def granularity(self) -> Fraction: ...
    @property
    def sensitivity_units(self) -> int: ...
    @property
    def sensitivity_squared_units(self) -> int | None: ...
    @property
    def loss(self) -> PrivacyLoss: ...
    @property
    def epsilon(self) -> Fraction | None: ...
    @property
    def scale_units(self) -> Fraction | None: ...
    @property
    def sigma2_units(self) -> Fraction | None: ...
    @property
    def parties(self) -> int: ...
    @property
    def sensitivity(self) -> float: ...
    @property
    def scale(self) -> float: ...


#: A sensitivity given lazily: (Δ in integer units, its derivation), computed only by a family
#: calibrated to it (Δ2² is the Gaussian's alone).
Sensitivity = Callable[[], tuple[int, str]]


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


def _exact_positive(name: str, value: object) -> Fraction:
    """`value` as an exact rational (a float is one: a binary fraction), refused unless it is a
    positive finite number."""
    exact = exact_rational(value, binary_floats=True, text=False)
    if exact is None:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    if exact <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return exact


class NoiseFamily(ABC):
    """One exact integer noise law, parametrised by one exact rational (see the module)."""

    mechanism: Mechanism
    name: str  # in words, for messages
    parameter_name: str  # "scale" (b) or "sigma2" (σ²)
    #: The measures whose losses it can spend, and the refusal of another one.
    spends: frozenset[Measure] = frozenset(Measure)
    refusal: str = ""
    #: Whether the fourth cumulant of a term says how far it is from normal, lattice included
    #: (the margins of error fold such terms into one normal term; `margins._moe`).
    cumulant_sees_lattice: bool
    #: Whether its noise can be split into shares that sites draw and the total sums
    #: (`NoiseLaw.parties`): the law of the sum is then exactly known (`summed_moe95`).
    sums_shares: bool = False

    @abstractmethod
    def exact(self, parameter: Fraction) -> Fraction:
        """The sampler's exact parameter for `parameter` (never less noise)."""

    @abstractmethod
    def draw(self, parameter: Fraction, size: int, source: NoiseSource) -> np.ndarray:
        """`size` exact draws (int64)."""

    @abstractmethod
    def variance(self, parameter: Fraction) -> float:
        """Var Z in integer units²."""

    @abstractmethod
    def moe95(self, parameter: Fraction) -> int:
        """The smallest integer h with P(|Z| ≤ h) ≥ 0.95."""

    def summed_moe95(self, parameter: Fraction, parties: int) -> int:
        """The smallest integer h with P(|Z_1 + … + Z_parties| ≤ h) ≥ 0.95, Z_i iid."""
        if parties != 1:
            raise ValueError(f"{self.name} noise is not split into shares")
        return self.moe95(parameter)

    @abstractmethod
    def scale(self, parameter: Fraction, granularity: Fraction) -> float:
        """The noise's scale in the column's units: b for Laplace, σ for Gaussian."""

    @abstractmethod
    def sensitivity(self, level: Calibrated) -> float:
        """The sensitivity it is calibrated to, in the column's units: Δ1, or Δ2."""

    @abstractmethod
    def calibrate(
        self, loss: PrivacyLoss, l1: tuple[int, str], l2: Sensitivity, path: str
    ) -> dict[str, Any]:
        """The fields of a `LevelNoise` spending `loss` at these sensitivities (Δ1 in units,
        and Δ2² in units², computed only if this family needs it); SpecError naming `path` for
        a law the sampler cannot draw."""

    @abstractmethod
    def need(
        self, target: Fraction, l1: Callable[[], Fraction], l2: Callable[[], Fraction],
        measure: Measure,
    ) -> Fraction:  # fmt: skip
        """The loss (in `measure`) a target 95% margin `target` needs, continuously approximated:
        `l1`, `l2` give Δ1 and Δ2² in the statistic's own units, before discretization."""

    @abstractmethod
    def text(self, measure: Measure) -> str:
        """How the noise is drawn, in words (a manifest's `mechanism`)."""

    @abstractmethod
    def stated(self, level: Calibrated) -> dict[str, Any]:
        """A level's sensitivity and exact noise parameter, as the manifest states them."""

    @abstractmethod
    def stated_measurement(self, level: Calibrated) -> dict[str, Any]:
        """What a whole measurement states besides `stated` (its norm, a calibrated ε)."""

    # -- floating-point numerics of margins of error, vectorised over this family's laws

    @abstractmethod
    def cumulants(self, parameters: Sequence[Fraction]) -> tuple[np.ndarray, np.ndarray]:
        """Var Z and the fourth cumulant of Z for each law."""

    @abstractmethod
    def log_cf(self, parameter: Fraction, s: np.ndarray) -> np.ndarray:
        """log E e^{isZ} (real: the law is symmetric)."""

    @abstractmethod
    def log_mgf_parts(
        self, parameters: Sequence[Fraction], law: np.ndarray, kappa: np.ndarray,
        counts: np.ndarray,
    ) -> list[Callable[[float], float]]:  # fmt: skip
        """λ ↦ Σ counts·log E e^{λκZ} over the terms of an error drawn from this family (term t
        from the law `parameters[law[t]]`), as parts to add up in order."""

    @abstractmethod
    def lambda_max(self, parameters: np.ndarray, kappa: np.ndarray) -> float:
        """Where Σ log E e^{λκZ} over these terms ends (inf: finite for every λ)."""

    @abstractmethod
    def variance_proxy(
        self, parameters: np.ndarray, kappa: np.ndarray, counts: np.ndarray
    ) -> float:
        """A subgaussian variance proxy of Σ κZ over these terms (a family whose moment
        generating function is finite everywhere)."""


class _Laplace(NoiseFamily):
    mechanism = Mechanism.LAPLACE
    name, parameter_name = "discrete Laplace", "scale"
    cumulant_sees_lattice = True

    def exact(self, parameter: Fraction) -> Fraction:
        return exact_scale(parameter)

    def draw(self, parameter: Fraction, size: int, source: NoiseSource) -> np.ndarray:
        return discrete_laplace(parameter, size, source)

    def variance(self, parameter: Fraction) -> float:
        return laplace_variance(parameter)

    def moe95(self, parameter: Fraction) -> int:
        return laplace_moe95(parameter)

    def scale(self, parameter: Fraction, granularity: Fraction) -> float:
        return float(parameter * granularity)

    def sensitivity(self, level: Calibrated) -> float:
        return float(level.sensitivity_units * level.granularity)

    def calibrate(
        self, loss: PrivacyLoss, l1: tuple[int, str], l2: Sensitivity, path: str
    ) -> dict[str, Any]:
        delta, derivation = l1
        epsilon = laplace_epsilon(loss)
        if epsilon <= 0:
            raise SpecError(path, "the ρ of this level leaves no ε for Laplace noise; raise ρ")
        scale = _drawable(exact_scale, Fraction(delta) / epsilon, path, "Δ/ε", "ε")
        return {"derivation": derivation, "epsilon": epsilon, "scale_units": scale}

    def need(
        self, target: Fraction, l1: Callable[[], Fraction], l2: Callable[[], Fraction],
        measure: Measure,
    ) -> Fraction:  # fmt: skip
        """ε = Δ1·ln(20)/h, charged ε (pure) or ε²/2 (zCDP)."""
        epsilon = l1() * Fraction(LN_20) / target
        return epsilon if measure is Measure.PURE else zcdp_of_pure(epsilon)

    def text(self, measure: Measure) -> str:
        return LAPLACE_TEXT if measure is Measure.PURE else LAPLACE_IN_ZCDP_TEXT

    def stated(self, level: Calibrated) -> dict[str, Any]:
        return {
            "sensitivity": level.sensitivity,
            "sensitivity_units": level.sensitivity_units,
            "noise_scale": level.scale,
            "noise_scale_units_exact": str(level.scale_units),
        }

    def stated_measurement(self, level: Calibrated) -> dict[str, Any]:
        if level.loss.measure is Measure.PURE:
            return {}
        return {"calibrated_epsilon_exact": str(level.epsilon)}

    def cumulants(self, parameters: Sequence[Fraction]) -> tuple[np.ndarray, np.ndarray]:
        scales = np.array([float(b) for b in parameters])
        return laplace_var_z(scales), laplace_k4_z(scales)

    def log_cf(self, parameter: Fraction, s: np.ndarray) -> np.ndarray:
        return laplace_log_cf(float(parameter), s)

    def log_mgf_parts(
        self, parameters: Sequence[Fraction], law: np.ndarray, kappa: np.ndarray,
        counts: np.ndarray,
    ) -> list[Callable[[float], float]]:  # fmt: skip
        scale = np.array([float(parameters[g]) for g in law])

        def part(lam: float) -> float:
            return float(np.sum(counts * laplace_log_mgf(scale, lam * kappa)))

        return [part]

    def lambda_max(self, parameters: np.ndarray, kappa: np.ndarray) -> float:
        """E e^{uZ} is infinite for |u| ≥ 1/b: 1/max(κb) over the terms."""
        return 1.0 / float(np.max(kappa * parameters))

    def variance_proxy(
        self, parameters: np.ndarray, kappa: np.ndarray, counts: np.ndarray
    ) -> float:
        raise ValueError("discrete Laplace noise is not subgaussian")


class _Gaussian(NoiseFamily):
    mechanism = Mechanism.GAUSSIAN
    name, parameter_name = "discrete Gaussian", "sigma2"
    spends = frozenset({Measure.ZCDP})
    refusal = "Gaussian noise spends ρ (zCDP), not ε"
    cumulant_sees_lattice = False  # its κ4 is below 1e-15·σ⁴ from σ² = 3 on, lattice or not
    sums_shares = True  # Kairouz, Liu & Steinke 2021 bound the sum (`dprelease.consortium`)

    def exact(self, parameter: Fraction) -> Fraction:
        return exact_sigma2(_exact_positive("σ²", parameter))

    def draw(self, parameter: Fraction, size: int, source: NoiseSource) -> np.ndarray:
        return discrete_gaussian(parameter, size, source)

    def variance(self, parameter: Fraction) -> float:
        return gaussian_law(parameter).variance

    def moe95(self, parameter: Fraction) -> int:
        return gaussian_law(parameter).abs_quantile95()

    def summed_moe95(self, parameter: Fraction, parties: int) -> int:
        return summed_gaussian_moe95(parameter, parties)

    def scale(self, parameter: Fraction, granularity: Fraction) -> float:
        return math.sqrt(parameter) * float(granularity)

    def sensitivity(self, level: Calibrated) -> float:
        squared = level.sensitivity_squared_units or 0  # always set on a Gaussian level
        return math.sqrt(squared) * float(level.granularity)

    def calibrate(
        self, loss: PrivacyLoss, l1: tuple[int, str], l2: Sensitivity, path: str
    ) -> dict[str, Any]:
        squared, derivation = l2()  # calibrated to, and explained by, Δ2
        sigma2 = _drawable(
            exact_sigma2, Fraction(squared) / (2 * loss.rho), path, "σ² = Δ2²/(2ρ)", "ρ"
        )
        return {
            "sensitivity_squared_units": squared,
            "derivation": derivation,
            "sigma2_units": sigma2,
        }

    def need(
        self, target: Fraction, l1: Callable[[], Fraction], l2: Callable[[], Fraction],
        measure: Measure,
    ) -> Fraction:  # fmt: skip
        """ρ = Δ2²·z²/(2h²)."""
        return l2() * _Z95 * _Z95 / (2 * target * target)

    def text(self, measure: Measure) -> str:
        return GAUSSIAN_TEXT

    def stated(self, level: Calibrated) -> dict[str, Any]:
        return {
            "sensitivity": level.sensitivity,
            "sensitivity_units": None,
            "sensitivity_squared_units": level.sensitivity_squared_units,
            "noise_scale": level.scale,
            "noise_scale_units_exact": None,
            # of the sum of the shares, with distributed noise (its variance parameter)
            "noise_variance_units_exact": str(level.parties * (level.sigma2_units or 0)),
        }

    def stated_measurement(self, level: Calibrated) -> dict[str, Any]:
        return {"sensitivity_norm": "L2"}

    def cumulants(self, parameters: Sequence[Fraction]) -> tuple[np.ndarray, np.ndarray]:
        laws = [gaussian_law(sigma2) for sigma2 in parameters]
        return (
            np.array([dg.variance for dg in laws], dtype=float),
            np.array([dg.fourth_cumulant for dg in laws], dtype=float),
        )

    def log_cf(self, parameter: Fraction, s: np.ndarray) -> np.ndarray:
        return gaussian_law(parameter).log_cf(s)

    def log_mgf_parts(
        self, parameters: Sequence[Fraction], law: np.ndarray, kappa: np.ndarray,
        counts: np.ndarray,
    ) -> list[Callable[[float], float]]:  # fmt: skip
        def part(dg: DiscreteGaussian, k: np.ndarray, n: np.ndarray) -> Callable[[float], float]:
            return lambda lam: float(np.sum(n * dg.log_mgf(lam * k)))

        return [
            part(gaussian_law(parameters[int(g)]), kappa[law == g], counts[law == g])
            for g in np.unique(law)
        ]

    def lambda_max(self, parameters: np.ndarray, kappa: np.ndarray) -> float:
        return math.inf  # E e^{uZ} ≤ e^{u²σ²/2} for every u (CKS 2020)

    def variance_proxy(
        self, parameters: np.ndarray, kappa: np.ndarray, counts: np.ndarray
    ) -> float:
        """Σ counts κ² σ²: E e^{uZ} ≤ e^{u²σ²/2} (CKS 2020)."""
        return float(np.sum(counts * kappa**2 * parameters))


LAPLACE: NoiseFamily = _Laplace()
GAUSSIAN: NoiseFamily = _Gaussian()
#: The families by mechanism, in the order the margins of error add their terms.
FAMILIES: dict[Mechanism, NoiseFamily] = {f.mechanism: f for f in (LAPLACE, GAUSSIAN)}


def noise_family(mechanism: Mechanism) -> NoiseFamily:
    """The noise a mechanism adds: the one rule that picks a family (see the module)."""
    return FAMILIES[mechanism]
