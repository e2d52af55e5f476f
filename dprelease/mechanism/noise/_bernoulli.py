"""Exact Bernoulli draws: Bernoulli(p) for rational p, and Bernoulli(exp(−γ)) for rational γ ≥ 0
(Canonne, Kamath & Steinke 2020, Algorithm 1), batched over numpy arrays.

Algorithm 1 for γ ≤ 1 draws A_k ~ Bernoulli(γ/k) for k = 1, 2, … until the first A_k = 0, at
trial K, and outputs 1 iff K is odd. Each A_k is a comparison of a uniform real R with the
rational γ/k, made lazily (`_bern_ratio`): R's first base-16 digit settles it with probability
15/16, so a trial costs little more than half a random byte whatever the size of γ's
denominator. γ > 1 splits as exp(−γ) = exp(−1)^⌊γ⌋ · exp(−(γ − ⌊γ⌋)); exp(−1)^w is the chance
that w Bernoulli(exp(−1)) draws all succeed, i.e. that a geometric run of them reaches w.
Every decision is an integer comparison, and a batch drops only whole, independent draws, never
part of one.
"""

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
    _pass_size,
    _python_uniform_below,
    _uniform_below,
)

# Denominators below this are compared in uint64 (16 times a numerator must fit); larger ones,
# which the samplers here reach only with negligible, data-independent probability, are compared
# with Python integers, exactly and slowly.
_VECTOR_DEN = 1 << 60
_NARROW: tuple[type[np.unsignedinteger], ...] = (np.uint16, np.uint32, np.uint64)
# Below this many entries a comparison draws a whole uniform word below den: more random bytes,
# but half the numpy calls, whose fixed cost then dominates (Algorithm 1's later trials).
_FEW = 4096


def _bern_ratio(stream: _BitStream, num: np.ndarray, den: int) -> np.ndarray:
    """Bernoulli(num/den) per entry (num: unsigned array, 0 ≤ num ≤ den): [R < num/den] for a
    uniform real R, of which only as many bits are drawn as the comparison needs.

    R's first base-16 digit, a random nibble r, is compared with d = ⌊16·num/den⌋: r < d means
    R < num/den, r > d the opposite. On a tie (probability 1/16) the rest of R, again uniform on
    [0, 1), is compared with the rest of num/den, rem/den with rem = 16·num − d·den: that is
    [W < rem] for a uniform integer W below den. Half a byte per entry, plus a word per tie.
    Few entries compare a uniform word below den with num at once.
    """
    if den >= _VECTOR_DEN:
        return np.fromiter(
            (_python_uniform_below(stream, den) < int(x) for x in num), dtype=bool, count=num.size
        )
    if num.size < _FEW:  # few entries: fewer numpy calls matter more than random bytes
        return _uniform_below(stream, den, num.size) < num
    dtype = next(d for d in _NARROW if den < 1 << (8 * np.dtype(d).itemsize - 4))
    den_d = dtype(den)
    shifted = num.astype(dtype)
    np.left_shift(shifted, 4, out=shifted)
    digit = np.empty(num.size, dtype=np.uint8)  # ⌊16·num/den⌋ ≤ 16
    np.floor_divide(shifted, den_d, out=digit, casting="unsafe")
    nibble = stream.nibbles(num.size)
    out = nibble < digit
    tie = np.equal(nibble, digit, out=nibble.view(bool)).nonzero()[0]
    if tie.size:
        rem = shifted.take(tie) - digit.take(tie).astype(dtype) * den_d
        out[tie] = _uniform_below(stream, den, tie.size) < rem
    return out


def _alg1(stream: _BitStream, num: np.ndarray, den: int, k: int = 1) -> np.ndarray:
    """Bernoulli(exp(−num/den)) per entry, 0 ≤ num ≤ den (Algorithm 1 for γ ≤ 1), starting at
    trial k: the entries are those whose trials before k all gave A = 1.

    Trial k compares with num/(den·k): past k ≈ 2**60/den (never reached in practice for the
    denominators used here: it takes k − 1 successes in a row, probability ≤ 1/(k − 1)!) the
    comparison falls back to Python integers, so the result is exact for every k.
    """
    go_on = _bern_ratio(stream, num, den * k)
    # An entry that stops at trial k outputs [k odd]. Every entry still going on holds the output
    # it would have if it stopped at the next trial, so only the continuing ones are written.
    out = np.logical_not(go_on) if k % 2 else go_on.copy()
    pending = go_on.nonzero()[0]
    pending_num = num.take(pending)
    while pending.size:
        k += 1
        go_on = _bern_ratio(stream, pending_num, den * k)
        pending, pending_num = pending.compress(go_on), pending_num.compress(go_on)
        out[pending] = k % 2 == 0  # the output if they stop at trial k + 1
    return out


def _e1_table() -> np.ndarray:
    """Algorithm 1 at γ = 1 for one random byte b: 0 or 1 where the byte settles the draw, 2 where
    Algorithm 1 must go on at trial k = 6, 3 where the byte is rejected.

    A byte below 240 gives r = b mod 120, uniform below 5! = 120. A_1 = Bernoulli(1) is always 1;
    A_k = Bernoulli(1/k) for k = 2..5 is [d_k = 0], where d_2..d_5 are the mixed-radix digits of
    r (d_k uniform below k, all independent). With z leading zero digits, K = 2 + z and the
    output is 1 iff z is odd; z ≥ 4 (r = 0, probability 1/120) leaves trial 6 to draw.
    """
    table = np.full(256, 3, dtype=np.uint8)
    for byte in range(240):
        r = byte % 120
        zeros = 0
        while zeros < 4 and r % math.factorial(zeros + 2) == 0:
            zeros += 1
        table[byte] = 2 if zeros == 4 else zeros % 2
    return table


_E1_TABLE = _e1_table()
_E1_SETTLED = 240 / 256  # fraction of bytes that are not rejected


def _bern_exp1(stream: _BitStream, n: int) -> np.ndarray:
    """n exact Bernoulli(exp(−1)) draws, about one random byte each (see `_e1_table`).

    Rejected bytes are dropped: the kept codes are iid, so the first n of them are n draws.
    """
    out = np.empty(n, dtype=bool)
    have = 0
    while have < n:
        codes = _E1_TABLE.take(stream.words(_pass_size((n - have) / _E1_SETTLED), np.uint8))
        codes = codes.compress(codes != 3)[: n - have]
        drawn = out[have : have + codes.size]
        np.equal(codes, 1, out=drawn)
        unresolved = (codes == 2).nonzero()[0]
        if unresolved.size:
            ones = np.ones(unresolved.size, dtype=np.uint64)
            drawn[unresolved] = _alg1(stream, ones, 1, k=6)
        have += codes.size
    return out


# Bernoulli(exp(−1)) draws per geometric V: E[V + 1] = 1/(1 − e^{−1}) ≈ 1.58.
_DRAWS_PER_RUN = -1.0 / math.expm1(-1.0)


def _geometric_e1(stream: _BitStream, n: int) -> np.ndarray:
    """n iid V with P(V = v) = (1 − e^{−1}) e^{−v}, i.e. P(V ≥ v) = e^{−v}: the number of
    Bernoulli(exp(−1)) successes before the first failure (Algorithm 2's inner loop).

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
        failures = np.logical_not(draws, out=draws).nonzero()[0]
        if not failures.size:
            carry += draws.size
            continue
        take = min(failures.size, n - have)
        runs = out[have : have + take]
        runs[0] = failures[0] + carry
        np.subtract(failures[1:take], failures[: take - 1], out=runs[1:])
        runs[1:] -= 1
        have += take
        carry = draws.size - 1 - int(failures[-1])
    return out


def _bern_exp_split(
    stream: _BitStream, whole: np.ndarray, rest: np.ndarray, den: int
) -> np.ndarray:
    """Bernoulli(exp(−(whole + rest/den))) per entry: whole int64 ≥ 0, 0 ≤ rest < den (uint64).

    exp(−whole) is the chance that a geometric run of Bernoulli(exp(−1)) draws reaches `whole`;
    it is drawn first, only where whole > 0, and Algorithm 1 on rest/den only for the survivors.
    """
    risky = whole.nonzero()[0]
    if not risky.size:
        return _alg1(stream, rest, den)
    alive = np.ones(whole.size, dtype=bool)
    alive[risky] = _geometric_e1(stream, risky.size) >= whole.take(risky)
    keep = alive.nonzero()[0]
    alive[keep] = _alg1(stream, rest.take(keep), den)
    return alive


def bernoulli_exp(
    gamma: Fraction | int, size: int, source: NoiseSource | None = None
) -> np.ndarray:
    """`size` exact, independent Bernoulli(exp(−gamma)) draws (bool) for a rational gamma ≥ 0.

    The building block of exact samplers (Canonne, Kamath & Steinke 2020, Algorithm 1). Any
    denominator is exact: below 2**60 the draws are vectorized, above they use Python integers.
    """
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Rational) or gamma < 0:
        raise NoiseError(f"gamma must be a non-negative int or Fraction, got {gamma!r}")
    num, den = int(gamma.numerator), int(gamma.denominator)
    n = _check_size(size)
    src = _check_source(source)
    if src._open_stream is None:
        raise NoiseError("source: the zero test source only supports noise draws")
    stream = _BitStream(src._open_stream())
    whole, rest = divmod(num, den)
    rest_array = np.full(n, rest, dtype=np.uint64 if den < _VECTOR_DEN else object)
    # A run of 2**62 Bernoulli(exp(−1)) successes would take more random bytes than exist, so
    # capping ⌊γ⌋ there to fit int64 changes no draw.
    return _bern_exp_split(stream, np.full(n, min(whole, 1 << 62), np.int64), rest_array, den)
