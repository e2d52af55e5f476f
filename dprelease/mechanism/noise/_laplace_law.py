"""The discrete Laplace law in floating point: what margins of error and interval bounds need of
it (the counterpart of `_gaussian_law`).

P(Z = z) = (1 − q)/(1 + q) · q^|z|, q = e^{−1/b}: the difference of two independent geometrics.
Every function takes the scale b as a float (a view of the exact scale the sampler used) and is
vectorised over numpy arrays of scales and arguments.
"""

from __future__ import annotations

import math

import numpy as np


def laplace_var_z(scales: np.ndarray) -> np.ndarray:
    """Var Z = 2q/(1 − q)², q = e^{−1/b}, at each scale."""
    return 2.0 * np.exp(-1.0 / scales) / np.expm1(-1.0 / scales) ** 2


def laplace_k4_z(scales: np.ndarray) -> np.ndarray:
    """Fourth cumulant of Z (a difference of two geometrics): 2q(1 + 4q + q²)/(1 − q)⁴."""
    q = np.exp(-1.0 / scales)
    return 2.0 * q * (1.0 + 4.0 * q + q**2) / np.expm1(-1.0 / scales) ** 4


def laplace_log_cf(scale: float, s: np.ndarray) -> np.ndarray:
    """log of the characteristic function at s: (1−q)²/(1 − 2q cos s + q²), written as
    −log1p(4q sin²(s/2)/(1−q)²) (positive, stable for huge b)."""
    q = math.exp(-1.0 / scale)
    one_minus_q = -math.expm1(-1.0 / scale)
    return -np.log1p(4.0 * q * np.sin(s / 2.0) ** 2 / one_minus_q**2)


def laplace_log_mgf(scales: np.ndarray | float, u: np.ndarray) -> np.ndarray:
    """log E e^{uZ} = log((1 − q)² / ((1 − q e^u)(1 − q e^{−u}))), finite for |u| < 1/b; each
    1 − q e^{±u} is −expm1(±u − 1/b), exact near u → 1/b, where q e^u → 1."""
    inv = 1.0 / scales
    return 2.0 * np.log(-np.expm1(-inv)) - np.log(-np.expm1(u - inv)) - np.log(-np.expm1(-u - inv))


def laplace_log_mgf_slope(scale: float, u: np.ndarray) -> np.ndarray:
    """d/du log E e^{uZ}: q e^u/(1 − q e^u) − q e^{−u}/(1 − q e^{−u}), for |u| < 1/b."""
    rate = 1.0 / scale
    rise, fall = u - rate, -u - rate
    return np.exp(rise) / -np.expm1(rise) - np.exp(fall) / -np.expm1(fall)
