"""Exact Bernoulli(exp(−γ)) draws for rational γ (Canonne, Kamath & Steinke 2020, Algorithm 1)."""

from __future__ import annotations

import math
import numbers
from fractions import Fraction

import numpy as np

from dprelease.errors import NoiseError
from dprelease.mechanism.noise._source import (
    NoiseSource,
    _BitStream,
    _check_size,
    _check_source,
    _uniform_below,
)


def _alg1_continue(
    stream: _BitStream, num: np.ndarray, den: int, k: int, result: np.ndarray, idx: np.ndarray
) -> None:
    """Run Algorithm 1 from trial k for the entries `idx`, with γ = num/den (num aligned to idx).

    Trial k draws A_k ~ Bernoulli(γ/k) as [uniform below den·k < num]; the first A_k = 0 stops
    with K = k, and the output is 1 iff K is odd. `result[idx]` must be True on entry, so only
    stops at even k need a write.

    den·k must stay below 2**64 (`_uniform_below` raises otherwise). Every caller has
    den ≤ 2**48 + 1, so that takes k ≥ 2**16 trials, reached with probability
    γ^(k−1)/(k−1)! ≤ 1/(2**16 − 1)! < 2**-900000 per entry: it never happens in practice, and
    it depends only on random bits and γ, never on the data.
    """
    while idx.size:
        go_on = _uniform_below(stream, den * k, idx.size) < num
        if k % 2 == 0:
            result[idx[~go_on]] = False
        idx, num = idx[go_on], num[go_on]
        k += 1


def _bern_exp_at_most_one(stream: _BitStream, num: np.ndarray, den: int) -> np.ndarray:
    """Bernoulli(exp(−num/den)) per entry, for 0 ≤ num ≤ den (Algorithm 1, γ ≤ 1)."""
    result = np.ones(num.size, dtype=bool)
    nonzero = np.flatnonzero(num)  # γ = 0: A_1 = Bernoulli(0) = 0, K = 1, output 1, no bits
    _alg1_continue(stream, num[nonzero], den, 1, result, nonzero)
    return result


def _e1_table() -> np.ndarray:
    """Algorithm 1 at γ = 1, resolved from one uniform r in [0, 720) = [0, 6!).

    A_1 = Bernoulli(1) is always 1; A_k = Bernoulli(1/k) for k = 2..6 is [digit d_k = 0], where
    d_2..d_6 are the mixed-radix digits of r (d_k uniform below k, all independent). With z
    leading zero digits, K = 2 + z and the output is 1 iff z is odd. r = 0 (z ≥ 5, probability
    1/720) is marked 2: Algorithm 1 continues at k = 7 for those entries.
    """
    table = np.empty(720, dtype=np.uint8)
    for r in range(720):
        zeros = 0
        while zeros < 5 and r % math.factorial(zeros + 2) == 0:
            zeros += 1
        table[r] = 2 if zeros == 5 else zeros % 2
    return table


_E1_TABLE = _e1_table()


def _bern_exp1(stream: _BitStream, n: int) -> np.ndarray:
    """n exact Bernoulli(exp(−1)) draws: one 16-bit word each, Algorithm 1 for the rare rest."""
    code = _E1_TABLE[_uniform_below(stream, 720, n)]
    result = code == 1
    unresolved = np.flatnonzero(code == 2)
    if unresolved.size:
        result[unresolved] = True
        ones = np.ones(unresolved.size, dtype=np.uint8)
        _alg1_continue(stream, ones, 1, 7, result, unresolved)
    return result


def _bern_exp_rational(stream: _BitStream, num: int, den: int, n: int) -> np.ndarray:
    """n draws of Bernoulli(exp(−γ)), γ = num/den ≥ 0 (Algorithm 1 with the γ > 1 split).

    For γ > 1, exp(−γ) = exp(−1)^⌊γ⌋ · exp(−(γ − ⌊γ⌋)): the draw is 1 only if ⌊γ⌋
    Bernoulli(exp(−1)) draws and one Bernoulli(exp(−(γ − ⌊γ⌋))) draw are all 1.
    """
    whole, rest = divmod(num, den)
    alive = np.arange(n)
    for _ in range(whole):
        if not alive.size:
            break
        alive = alive[_bern_exp1(stream, alive.size)]
    if rest and alive.size:
        alive = alive[_bern_exp_at_most_one(stream, np.full(alive.size, rest, np.uint64), den)]
    result = np.zeros(n, dtype=bool)
    result[alive] = True
    return result


def bernoulli_exp(
    gamma: Fraction | int, size: int, source: NoiseSource | None = None
) -> np.ndarray:
    """`size` exact, independent Bernoulli(exp(−gamma)) draws (bool) for a rational gamma ≥ 0.

    The building block of exact samplers (Canonne, Kamath & Steinke 2020, Algorithm 1).
    `gamma` must have a denominator ≤ 2**32 so every comparison fits in 64 bits.
    """
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Rational) or gamma < 0:
        raise NoiseError(f"gamma must be a non-negative int or Fraction, got {gamma!r}")
    g = Fraction(int(gamma.numerator), int(gamma.denominator))
    if g.denominator > 1 << 32:
        raise NoiseError("gamma must have a denominator of at most 2**32")
    n = _check_size(size)
    src = _check_source(source)
    if src._open_stream is None:
        raise NoiseError("source: the zero test source only supports noise draws")
    stream = _BitStream(src._open_stream(), n * 4)
    return _bern_exp_rational(stream, g.numerator, g.denominator, n)
