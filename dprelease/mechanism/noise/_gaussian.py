"""Exact discrete Gaussian noise (Canonne, Kamath & Steinke 2020, Algorithm 3).

P(Z = z) ∝ exp(−z²/(2σ²)) on the integers, for an exact rational σ². Algorithm 3 draws a
discrete Laplace candidate Y with integer scale t and keeps it with probability exp(−γ),
γ = (|Y| − σ²/t)²/(2σ²); the kept candidates have exactly the discrete Gaussian law for any
t > 0 (the Laplace density cancels). We take t = ⌈σ⌉: CKS take ⌊σ⌋ + 1, which is the same
unless σ is an integer, where t = σ keeps more candidates (at σ = 1, 70% of the Laplace draws
instead of 54%, and scale 1 needs no uniform U in Algorithm 2). About 3 in 4 are kept for
large σ.

Why σ² is held as t·P/E: γ = (|Y|·E − P)²/(2·t·P·E), a square of an integer over a denominator
D = 2·t·P·E fixed by σ² alone. `exact_sigma2` rounds σ²/t UP to a denominator E ≤ 2**26/t, so
D < 2**53 and the integer |Y|·E − P stays below 2**32 (its square fits in 64 bits) unless
|Y| > 63·t, which happens with probability about e^{−63} per candidate and is then computed with
Python integers. The rounding raises σ² by at most t/⌊2**26/t⌋: a relative 2**-24 for σ ≥ 1,
2**-26 for σ < 1 (never less noise). γ's integer part w and fractional part r/D are drawn as
exp(−w) (a geometric run of Bernoulli(exp(−1)) reaching w) times exp(−r/D) (Algorithm 1, one
lazy comparison per trial).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dprelease.mechanism.noise._bernoulli import _bern_exp_split
from dprelease.mechanism.noise._gaussian_law import gaussian_law
from dprelease.mechanism.noise._laplace import (
    _acceptance,
    _exact_parameter,
    _laplace_magnitudes,
    _round_up,
    _signed,
)
from dprelease.mechanism.noise._source import (
    NoiseSource,
    _BitStream,
    _draw_in_chunks,
    _fill_in_passes,
)

# t·E ≤ 2**26 bounds |Y|·E − P below 2**32 for |Y| < 63·t, and D = 2·t·P·E ≤ 2·(t·E)² ≤ 2**53.
_SPAN = 1 << 26
_FAST_ROOT = 1 << 32  # |Y|·E − P below this: its square is computed in uint64


def _t_of(sigma2: Fraction) -> int:
    """t = ⌈σ⌉ ≥ 1, exactly: with s = ⌊√⌊x⌋⌋ = ⌊√x⌋, ⌈√x⌉ is s if x = s², else s + 1."""
    root = math.isqrt(sigma2.numerator // sigma2.denominator)
    return root if root * root == sigma2 else root + 1


def exact_sigma2(sigma2: float | int | Fraction) -> Fraction:
    """The exact rational σ² that sampling uses: never smaller than `sigma2`.

    σ² is kept as it is when σ²/t, t = ⌈σ⌉, has a denominator ≤ 2**26/t (an integer or a
    float like 2.5 does, and every integer below 2**26); otherwise σ²/t is rounded UP to the
    closest fraction with such a denominator, which raises σ² by at most a relative 2**-24
    (2**-26 for σ < 1). Why: see the module docstring.
    """
    exact = _exact_parameter("sigma2", sigma2)
    t = _t_of(exact)
    # σ² ∈ ((t − 1)², t²] and σ²/t < t rounds up to at most t, so the result has the same t.
    return t * _round_up(exact / t, max(1, _SPAN // t))


@dataclass(frozen=True)
class _Law:
    """Algorithm 3's integers for one σ² = t·P/E, and its expected acceptance (for batch sizes)."""

    t: int
    p: int
    e: int
    den: int  # D = 2·t·P·E
    accept: float  # candidates kept per Laplace candidate drawn, Laplace rejections included

    @classmethod
    def of(cls, sigma2: Fraction) -> _Law:
        t = _t_of(sigma2)
        c = sigma2 / t
        # P(keep a Laplace draw) = (1 − q)/(1 + q) · e^{−σ²/(2t²)} · Σ_z e^{−z²/(2σ²)}, q = e^{−1/t}
        s2 = float(sigma2)
        q = math.exp(-1.0 / t)
        keep = (
            -math.expm1(-1.0 / t)
            / (1.0 + q)
            * math.exp(-s2 / (2 * t * t))
            * gaussian_law(sigma2).mass
        )
        den = 2 * t * c.numerator * c.denominator
        return cls(t, c.numerator, c.denominator, den, min(1.0, keep) * _acceptance(t, 1))


def _alg3_keep(stream: _BitStream, law: _Law, magnitude: np.ndarray) -> np.ndarray:
    """Algorithm 3's acceptance of Laplace draws of sizes |y|: Bernoulli(exp(−(|y|E − P)²/D))."""
    root = magnitude * law.e
    root -= law.p
    np.abs(root, out=root)
    alpha = root.view(np.uint64)
    square = alpha * alpha
    whole = square // np.uint64(law.den)
    rest = square - whole * np.uint64(law.den)
    if alpha.size and alpha.max() >= _FAST_ROOT:  # |y| > 63·t: probability ≈ e^{−63} each
        for i in np.flatnonzero(alpha >= _FAST_ROOT):
            w, r = divmod(int(alpha[i]) ** 2, law.den)
            whole[i], rest[i] = min(w, 1 << 62), r  # a run of 2**62 successes cannot happen
    return _bern_exp_split(stream, whole.view(np.int64), rest, law.den)


def _gaussian_kept(stream: _BitStream, law: _Law, m: int) -> np.ndarray:
    """Algorithm 3 on m Laplace candidates: the kept ones, signed, in order."""
    magnitude, negative = _laplace_magnitudes(stream, law.t, 1, m)
    keep = _alg3_keep(stream, law, magnitude)
    return _signed(magnitude.compress(keep), negative.compress(keep))


def _discrete_gaussian_into(stream: _BitStream, law: _Law, out: np.ndarray) -> None:
    """Fill `out` with Algorithm 3 draws, in passes of whole batches of Laplace candidates."""
    _fill_in_passes(out, law.accept, lambda m: _gaussian_kept(stream, law, m))


def discrete_gaussian(
    sigma2: float | int | Fraction, size: int, source: NoiseSource | None = None
) -> np.ndarray:
    """`size` independent exact draws (int64) with P(Z = z) ∝ exp(−z²/(2σ²)),
    σ² = exact_sigma2(sigma2).

    The work depends only on `sigma2` and `size`, never on the values the noise is added to.
    Large sizes are drawn in chunks so memory stays bounded.
    """
    law = _Law.of(exact_sigma2(sigma2))
    return _draw_in_chunks(
        source, size, lambda stream, out: _discrete_gaussian_into(stream, law, out)
    )


# --------------------------------------------------------------------------- reporting helpers


def gaussian_variance(sigma2: float | int | Fraction) -> float:
    """Var Z at the exact σ² used for sampling: slightly below σ² (Canonne, Kamath & Steinke
    2020), equal to it in float64 once σ² ≥ 3 (see `_gaussian_law`)."""
    return gaussian_law(exact_sigma2(sigma2)).variance


def gaussian_moe95(sigma2: float | int | Fraction) -> int:
    """Smallest integer h with P(|Z| ≤ h) ≥ 0.95 at the exact σ² used for sampling; a tail too
    close to 5% for float64 to decide errs up by one, never down (see `_gaussian_law`)."""
    return gaussian_law(exact_sigma2(sigma2)).abs_quantile95()
