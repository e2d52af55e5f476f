"""Exact noise: integers drawn from the exact discrete Laplace and Gaussian laws, from a CSPRNG.

Why integers: floating-point noise (`x + b·ln U`, Box–Muller) leaks the true value through the
gaps in the set of representable outputs (Mironov 2012). We sample the discrete Laplace
P(Z = z) ∝ exp(−|z|/b) and the discrete Gaussian P(Z = z) ∝ exp(−z²/(2σ²)) exactly, following
Canonne, Kamath & Steinke 2020, "The Discrete Gaussian for Differential Privacy": Algorithm 1
(Bernoulli(exp(−γ)) for rational γ), Algorithm 2 (discrete Laplace with rational scale t/s) and
Algorithm 3 (discrete Gaussian with rational σ², from discrete Laplace candidates). Scales are
held as exact rationals (`exact_scale`, `exact_sigma2`: never below what was asked), and every
random decision is an integer comparison against uniformly random integers from the source; no
floating-point log/exp is involved in sampling, so the released law is exactly the one the
privacy proof assumes.

Why vectorized, and why the data cannot steer it: a release noises millions of cells at once, so
each algorithm runs on numpy batches of iid candidates and keeps the accepted ones in order.
Callers pass only the number of cells and the scale, so nothing about the cell values can
influence which bits are drawn or how long sampling takes.

Each law is also a family (`NoiseFamily`): how a loss and a sensitivity make its parameter, its
variance, margin of error and words; `noise_family(mechanism)` is the one rule that picks it, and
`LevelNoise` is one noisy vector's calibrated law.
"""

from dprelease.mechanism.noise._bernoulli import bernoulli_exp
from dprelease.mechanism.noise._distributed import (
    distributed_gaussian_share,
    summed_gaussian_moe95,
    summed_gaussian_pmf,
    summed_gaussian_variance,
)
from dprelease.mechanism.noise._gaussian import (
    discrete_gaussian,
    exact_sigma2,
    gaussian_moe95,
    gaussian_variance,
)
from dprelease.mechanism.noise._gaussian_law import DiscreteGaussian, gaussian_law
from dprelease.mechanism.noise._laplace import (
    discrete_laplace,
    exact_scale,
    laplace_moe95,
    laplace_variance,
)
from dprelease.mechanism.noise._laplace_law import laplace_log_mgf, laplace_log_mgf_slope
from dprelease.mechanism.noise._laws import (
    FAMILIES,
    LN_20,
    MAX_SENSITIVITY_UNITS,
    NoiseFamily,
    Sensitivity,
    noise_family,
)
from dprelease.mechanism.noise._level import LevelNoise, NoiseLaw, level_noise
from dprelease.mechanism.noise._source import (
    NoiseSource,
    WordStream,
    default_noise_source,
    require_private,
    word_stream,
)
from dprelease.mechanism.noise._uniform import UniformIntegers

__all__ = [
    "FAMILIES",
    "LN_20",
    "MAX_SENSITIVITY_UNITS",
    "DiscreteGaussian",
    "LevelNoise",
    "NoiseFamily",
    "NoiseLaw",
    "NoiseSource",
    "Sensitivity",
    "WordStream",
    "UniformIntegers",
    "bernoulli_exp",
    "default_noise_source",
    "discrete_gaussian",
    "discrete_laplace",
    "distributed_gaussian_share",
    "exact_scale",
    "exact_sigma2",
    "gaussian_law",
    "gaussian_moe95",
    "gaussian_variance",
    "laplace_log_mgf",
    "laplace_log_mgf_slope",
    "laplace_moe95",
    "laplace_variance",
    "level_noise",
    "noise_family",
    "require_private",
    "summed_gaussian_moe95",
    "summed_gaussian_pmf",
    "summed_gaussian_variance",
    "word_stream",
]
