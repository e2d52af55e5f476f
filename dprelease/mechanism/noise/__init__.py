"""Exact noise: samplers that draw integers from the exact discrete laws, from a CSPRNG.

Why integers: floating-point Laplace (`x + b·ln U`) leaks the true value through the gaps in
the set of representable outputs (Mironov 2012). We sample the discrete Laplace
P(Z = z) ∝ exp(−|z|/b) exactly, following Canonne, Kamath & Steinke 2020, "The Discrete
Gaussian for Differential Privacy": Algorithm 1 (Bernoulli(exp(−γ)) for rational γ) and
Algorithm 2 (discrete Laplace with rational scale t/s). The scale is held as an exact rational,
and every random decision is an integer comparison against uniformly random integers; no
floating-point log/exp is involved in sampling.
"""

from dprelease.mechanism.noise._bernoulli import bernoulli_exp
from dprelease.mechanism.noise._gaussian import (
    discrete_gaussian,
    exact_sigma2,
    gaussian_moe95,
    gaussian_variance,
)
from dprelease.mechanism.noise._laplace import (
    discrete_laplace,
    exact_scale,
    laplace_moe95,
    laplace_variance,
)
from dprelease.mechanism.noise._source import NoiseSource, default_noise_source, require_private

__all__ = [
    "NoiseSource",
    "bernoulli_exp",
    "default_noise_source",
    "discrete_gaussian",
    "discrete_laplace",
    "exact_scale",
    "exact_sigma2",
    "gaussian_moe95",
    "gaussian_variance",
    "laplace_moe95",
    "laplace_variance",
    "require_private",
]
