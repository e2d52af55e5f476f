"""Exact discrete Laplace noise (Canonne, Kamath & Steinke 2020, Algorithm 2)."""

from __future__ import annotations

import math
import numbers
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

import numpy as np

from dprelease.errors import NoiseError
from dprelease.mechanism.noise import _source
from dprelease.mechanism.noise._bernoulli import _bern_exp1, _bern_exp_at_most_one
from dprelease.mechanism.noise._source import (
    NoiseSource,
    _BitStream,
    _check_size,
    _check_source,
    _pass_size,
    _uniform_below,
)

# A float scale becomes t/s with s ≤ 10**6 (rounding adds at most 1e-6, or 2**-47 relative for
# huge scales) and t ≤ 2**48 + 1, so t·k (Algorithm 1, trial k) and U + t·V (Algorithm 2) stay
# far inside int64.
_MAX_DENOMINATOR = 10**6
_MAX_NUMERATOR = 2**48
_MAX_SCALE = Fraction(2**48)


def exact_scale(scale: float | int | Fraction) -> Fraction:
    """The exact rational scale t/s that sampling uses: never smaller than `scale`.

    Rationals with a denominator ≤ 10**6 are kept as they are (a float like 10.0 or 0.5 is
    exact); anything else is rounded UP to the closest fraction with a bounded denominator,
    so the noise is never less than asked. The engine records `str()` of the result.
    """
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise NoiseError(f"scale must be a positive finite number, got {type(scale).__name__}")
    if isinstance(scale, numbers.Rational):
        exact = Fraction(int(scale.numerator), int(scale.denominator))
    else:
        as_float = float(scale)
        if not math.isfinite(as_float):
            raise NoiseError(f"scale must be a positive finite number, got {as_float!r}")
        exact = Fraction(as_float)
    if exact <= 0:
        raise NoiseError(f"scale must be positive, got {float(exact)!r}")
    if exact > _MAX_SCALE:
        raise NoiseError(f"scale must be at most 2**48 (~2.8e14), got {float(exact)!r}")
    max_den = max(1, min(_MAX_DENOMINATOR, _MAX_NUMERATOR // math.ceil(exact)))
    return _round_up(exact, max_den)


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


# Bernoulli(exp(−1)) draws per geometric V: E[V + 1] = 1/(1 − e^{−1}) ≈ 1.58.
_DRAWS_PER_RUN = -1.0 / math.expm1(-1.0)


def _geometric_e1(stream: _BitStream, n: int) -> np.ndarray:
    """n iid V with P(V = v) = (1 − e^{−1}) e^{−v}: Algorithm 2's inner loop, which counts
    Bernoulli(exp(−1)) successes until the first failure.

    Exact for any pass sizes: the output is the first n runs of ONE iid Bernoulli stream, read in
    passes. The run still open at the end of a pass is carried into the next (its successes
    start the next run). Dropping it instead, as an earlier version did, keeps only runs that fit
    in the pass, which favours short runs and caps V. Runs after the n-th are never looked at.
    """
    out = np.empty(n, dtype=np.int64)
    have = 0
    carry = 0  # successes of the run left open by the previous pass
    while have < n:
        draws = _bern_exp1(stream, _pass_size((n - have) * _DRAWS_PER_RUN))
        failures = np.flatnonzero(~draws)
        if not failures.size:
            carry += draws.size
            continue
        runs = np.diff(failures, prepend=-1) - 1
        runs[0] += carry
        take = min(runs.size, n - have)
        out[have : have + take] = runs[:take]
        have += take
        carry = draws.size - 1 - int(failures[-1])
    return out


# t ≤ 2**48 + 1 and V < 2**14 keep U + t·V below 2**63. An int64 cannot hold the unbounded
# support of the discrete Laplace, so a larger V raises instead of being truncated (which would
# bias the law): P(V ≥ 2**14) = e^{−16384} < 2**-23000 per draw, so no feasible release (even
# 2**63 draws) will ever see it, and it depends only on the random bits and the scale, never
# on the data. Like an OS error, it would fail the release closed (nothing published).
_V_LIMIT = 1 << 14


def _acceptance(t: int, s: int) -> float:
    """Expected fraction of Algorithm 2 candidates kept; used only to size batches."""
    keep_u = 1.0 if t == 1 else -math.expm1(-1.0) / (t * -math.expm1(-1.0 / t))
    keep_sign = (1.0 + math.exp(-s / t)) / 2.0
    return keep_u * keep_sign


def _discrete_laplace_batch(
    stream: _BitStream, t: int, s: int, n: int, accept: float
) -> np.ndarray:
    """n draws of Algorithm 2 with scale t/s, run on whole batches of candidates.

    Per candidate: U uniform below t, kept with probability exp(−U/t); V geometric as above;
    X = U + t·V is then geometric with ratio exp(−1/t); Y = ⌊X/s⌋ is geometric with ratio
    exp(−s/t); a fair sign bit B; the candidate is rejected if B = 1 and Y = 0 (so 0 is not
    counted twice); otherwise the output is (1 − 2B)·Y.
    """
    out = np.empty(n, dtype=np.int64)
    have = 0
    while have < n:  # candidates are iid, so keeping the first n accepted is exact
        m = _pass_size((n - have) / accept)
        if t == 1:  # U is always 0 and exp(−0/t) = 1: nothing to draw
            x = _geometric_e1(stream, m)
        else:
            u = _uniform_below(stream, t, m)
            u = u[_bern_exp_at_most_one(stream, u, t)].astype(np.int64)
            v = _geometric_e1(stream, u.size)
            if v.size and v.max() >= _V_LIMIT:
                raise NoiseError("internal: geometric draw beyond the int64-safe range")
            x = u + t * v
        y = x // s if s > 1 else x
        negative = stream.bits(y.size)
        z = np.where(negative, -y, y)[~(negative & (y == 0))]
        take = min(z.size, n - have)
        out[have : have + take] = z[:take]
        have += take
    return out


def discrete_laplace(
    scale: float | int | Fraction, size: int, source: NoiseSource | None = None
) -> np.ndarray:
    """`size` independent exact draws (int64) with P(Z = z) ∝ exp(−|z|/b), b = exact_scale(scale).

    The work depends only on `scale` and `size`, never on the values the noise is added to.
    Large sizes are drawn in chunks so memory stays bounded.
    """
    b = exact_scale(scale)
    n = _check_size(size)
    src = _check_source(source)
    if src._open_stream is None:
        return np.zeros(n, dtype=np.int64)
    out = np.empty(n, dtype=np.int64)
    t, s = b.numerator, b.denominator
    accept = _acceptance(t, s)
    starts = range(0, n, _source._CHUNK)
    # Streams are opened here, in chunk order, so a seeded source is reproducible.
    streams = [_BitStream(src._open_stream(), min(n, _source._CHUNK) * 16) for _ in starts]

    def fill(start: int, stream: _BitStream) -> None:
        stop = min(start + _source._CHUNK, n)
        out[start:stop] = _discrete_laplace_batch(stream, t, s, stop - start, accept)

    if len(streams) == 1 or _source._WORKERS == 1:
        for start, stream in zip(starts, streams, strict=True):
            fill(start, stream)
    else:
        with ThreadPoolExecutor(_source._WORKERS) as pool:
            list(pool.map(fill, starts, streams))
    return out


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
