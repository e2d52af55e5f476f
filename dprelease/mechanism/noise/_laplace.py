"""Exact discrete Laplace noise (Canonne, Kamath & Steinke 2020, Algorithm 2).

P(Z = z) ∝ exp(−|z|/b) for an exact rational scale b = t/s. Each step of the algorithm runs on
a numpy batch of candidates. Candidates are independent and identically distributed, so
rejection sampling simply keeps the accepted ones in order; the kept values are still iid with
the target law, and surplus complete draws may be discarded. A draw a batch leaves unfinished
(a run of Bernoulli successes still open, an undecided comparison) is finished with fresh bits,
never dropped or restarted: that would bias its law.
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction

import numpy as np

from dprelease.errors import NoiseError
from dprelease.loss import decimal_text, exact_rational
from dprelease.mechanism.noise._bernoulli import _alg1, _geometric_e1
from dprelease.mechanism.noise._source import (
    NoiseSource,
    _BitStream,
    _draw_in_chunks,
    _fill_in_passes,
    _uniform_words,
    _word_for,
)

# A float scale becomes t/s with s ≤ 10**6 (rounding adds at most 1e-6, or 2**-47 relative for
# huge scales) and t ≤ 2**48 + 1, so t·k (Algorithm 1, trial k) and U + t·V (Algorithm 2) stay
# far inside int64.
_MAX_DENOMINATOR = 10**6
_MAX_NUMERATOR = 2**48
#: The largest noise parameter (a Laplace scale b, a Gaussian σ²) the samplers accept.
_MAX_PARAMETER = Fraction(2**48)


def exact_scale(scale: float | int | Fraction) -> Fraction:
    """The exact rational scale t/s that sampling uses: never smaller than `scale`.

    Rationals with a denominator ≤ 10**6 are kept as they are (a float like 10.0 or 0.5 is
    exact); anything else is rounded UP to the closest fraction with a bounded denominator,
    so the noise is never less than asked. The engine records `str()` of the result.
    """
    exact = _exact_parameter("scale", scale)
    max_den = max(1, min(_MAX_DENOMINATOR, _MAX_NUMERATOR // math.ceil(exact)))
    return _round_up(exact, max_den)


def _exact_parameter(name: str, value: float | int | Fraction) -> Fraction:
    """`value` as an exact rational, NoiseError naming `name` unless it is a finite real in
    (0, 2**48]: the one check of a noise parameter before it is rounded for sampling, so a
    Laplace scale and a Gaussian σ² are refused in the same words."""
    exact = exact_rational(value, binary_floats=True, text=False)
    if exact is None:
        shown = (
            repr(float(value))
            if isinstance(value, numbers.Real) and not isinstance(value, bool)
            else type(value).__name__
        )
        raise NoiseError(f"{name} must be a positive finite number, got {shown}")
    if exact <= 0:
        raise NoiseError(f"{name} must be positive, got {decimal_text(exact)}")
    if exact > _MAX_PARAMETER:  # (it can be beyond any double: formatted without float())
        raise NoiseError(f"{name} must be at most 2**48 (~2.8e14), got {decimal_text(exact)}")
    return exact


def _round_up(x: Fraction, max_den: int) -> Fraction:
    """The smallest fraction ≥ x with denominator ≤ max_den (best upper approximation).

    Same continued-fraction walk as `Fraction.limit_denominator`, whose two final candidates
    bracket x and are the best approximations from each side; we keep the one above x.
    """
    if x.denominator <= max_den:
        return x
    p0, q0, p1, q1 = 0, 1, 1, 0
    n, d = x.numerator, x.denominator
    while True:
        a = n // d
        q2 = q0 + a * q1
        if q2 > max_den:
            break
        p0, q0, p1, q1 = p1, q1, p0 + a * p1, q2
        n, d = d, n - a * d
    k = (max_den - q0) // q1
    semiconvergent = Fraction(p0 + k * p1, q0 + k * q1)
    convergent = Fraction(p1, q1)
    return semiconvergent if semiconvergent > x else convergent


# --------------------------------------------------------------------------- Algorithm 2


# t ≤ 2**48 + 1 and V < 2**14 keep U + t·V below 2**63. An int64 cannot hold the unbounded
# support of the discrete Laplace, so a larger V raises instead of being truncated (which would
# bias the law): P(V ≥ 2**14) = e^{−16384} < 2**-23000 per draw, so no feasible release (even
# 2**63 draws) will ever see it, and it depends only on the random bits and the scale, never
# on the data. Like an OS error, it would fail the release closed (nothing published).
_V_LIMIT = 1 << 14


def _acceptance(t: int, s: int) -> float:
    """Expected fraction of Algorithm 2 candidates kept; used only to size batches."""
    dtype, q = _word_for(t)
    keep_word = t * q / (1 << (8 * np.dtype(dtype).itemsize))
    keep_u = 1.0 if t == 1 else keep_word * -math.expm1(-1.0) / (t * -math.expm1(-1.0 / t))
    keep_sign = (1.0 + math.exp(-s / t)) / 2.0
    return keep_u * keep_sign


def _accepted_u(stream: _BitStream, t: int, m: int) -> np.ndarray:
    """Algorithm 2's first step on m candidates: U uniform below t, kept with probability
    exp(−U/t) by Algorithm 1. Returns the kept U (int64), in order. A uniform word that cannot
    give an unbiased U rejects its candidate: that depends on the candidate's own bits only.
    """
    u, usable = _uniform_words(stream, t, m)
    if usable is not None:
        u = u.compress(usable)
    return u.compress(_alg1(stream, u, t)).astype(np.int64)


def _laplace_magnitudes(
    stream: _BitStream, t: int, s: int, m: int
) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 2 on m candidates with scale t/s: for the accepted ones, in order, |Z| (int64)
    and the sign bit B (bool). About m·_acceptance(t, s) of them.

    Per candidate: U uniform below t, kept with probability exp(−U/t) (Algorithm 1); V geometric
    as above; X = U + t·V is then geometric with ratio exp(−1/t); Y = ⌊X/s⌋ is geometric with
    ratio exp(−s/t); a fair sign bit B; the candidate is rejected if B = 1 and Y = 0 (so 0 is
    not counted twice); otherwise the draw is (1 − 2B)·Y. A uniform word that cannot give an
    unbiased U rejects its candidate too: that depends on the candidate's own bits only.
    """
    if t == 1:  # U is always 0 and exp(−0/t) = 1: nothing to draw
        x = _geometric_e1(stream, m)
    else:
        u = _accepted_u(stream, t, m)
        x = _geometric_e1(stream, u.size)
        if x.size and x.max() >= _V_LIMIT:
            raise NoiseError("internal: geometric draw beyond the int64-safe range")
        x *= t
        x += u.view(np.int64) if u.dtype == np.uint64 else u  # U < t ≤ 2**48 + 1: x < 2**63
    if s > 1:
        x //= s
    negative = stream.bits(x.size)
    keep = np.not_equal(x, 0)
    keep |= np.logical_not(negative)
    return x.compress(keep), negative.compress(keep)


def _signed(magnitude: np.ndarray, negative: np.ndarray) -> np.ndarray:
    """(1 − 2B)·Y, in place: −Y in two's complement where B = 1, Y where B = 0."""
    sign = negative.view(np.int8)
    np.bitwise_xor(magnitude, np.negative(sign), out=magnitude)
    np.add(magnitude, sign, out=magnitude)
    return magnitude


def _discrete_laplace_into(stream: _BitStream, t: int, s: int, out: np.ndarray) -> None:
    """Fill `out` with draws of Algorithm 2 with scale t/s, in passes of whole batches."""
    _fill_in_passes(
        out, _acceptance(t, s), lambda m: _signed(*_laplace_magnitudes(stream, t, s, m))
    )


def discrete_laplace(
    scale: float | int | Fraction, size: int, source: NoiseSource | None = None
) -> np.ndarray:
    """`size` independent exact draws (int64) with P(Z = z) ∝ exp(−|z|/b), b = exact_scale(scale).

    The work depends only on `scale` and `size`, never on the values the noise is added to.
    Large sizes are drawn in chunks so memory stays bounded.
    """
    b = exact_scale(scale)
    t, s = b.numerator, b.denominator
    return _draw_in_chunks(
        source, size, lambda stream, out: _discrete_laplace_into(stream, t, s, out)
    )


# --------------------------------------------------------------------------- reporting helpers


def laplace_variance(scale: float | int | Fraction) -> float:
    """Var Z = 2q/(1 − q)², q = exp(−1/b), at the exact scale b used for sampling."""
    x = 1.0 / float(exact_scale(scale))
    return 2.0 * math.exp(-x) / math.expm1(-x) ** 2


def laplace_moe95(scale: float | int | Fraction) -> int:
    """Smallest integer h with P(|Z| ≤ h) ≥ 0.95 at the exact scale used for sampling.

    P(|Z| > h) = 2q^{h+1}/(1 + q); the closed form gives a guess that is then checked and
    nudged so float rounding cannot make the reported interval too narrow.
    """
    b = float(exact_scale(scale))
    q = math.exp(-1.0 / b)

    def tail(h: int) -> float:
        return 2.0 * math.exp(-(h + 1) / b) / (1.0 + q)

    h = max(0, math.ceil(b * (math.log(40.0) - math.log1p(q))) - 1)
    while h > 0 and tail(h - 1) <= 0.05:
        h -= 1
    while tail(h) > 0.05:
        h += 1
    return h
