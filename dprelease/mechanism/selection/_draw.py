"""The random part of key selection: every random bit it uses comes through here.

This is the one module of the selection package that uses the noise package's internals (its bit
streams), so when the mechanism package moves, only this file follows it.

Two draws, both exact:

- A threshold rule adds exact discrete Laplace or discrete Gaussian noise (the project's
  samplers) to each candidate key's integer weight and keeps the keys at or above τ.
- The optimal rule keeps a key held by n units with probability p(n), a real number known as a
  rigorous interval (`_optimal.KeepTable`). We draw U uniform in [0, 1) one 64-bit word at a time
  and keep the key iff U < p(n): after the first word W, U lies in [W/2⁶⁴, (W + 1)/2⁶⁴), so the
  answer is "keep" if (W + 1)/2⁶⁴ ≤ lo and "drop" if W/2⁶⁴ ≥ hi; only when the word lands within
  a word of the interval (probability ≤ 2⁻⁶² per key with 50-digit intervals) are more words
  drawn and p(n) bounded more tightly, until the two separate. That is exactly Bernoulli(p(n)),
  never an approximation of it; the number of words drawn is one per candidate key outside that
  rare case.

The top bit of each word is flipped before use (a bijection of the uniform words, so U is still
uniform): with the all-zero test source, U = 1/2 and the optimal rule keeps exactly the keys with
p(n) > 1/2, as a threshold rule with zero noise keeps those at or above τ.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from dprelease.mechanism.noise import (
    NoiseSource,
    default_noise_source,
    discrete_gaussian,
    discrete_laplace,
    word_stream,
)
from dprelease.mechanism.selection._optimal import KeepTable, keep_table

_TOP = np.uint64(1 << 63)
_WORD = 1 << 64
#: Each refinement of an undecided draw draws one more word and this many more digits of p(n).
_MORE_DIGITS = 25


def _words(source: NoiseSource | None, size: int) -> np.ndarray:
    """`size` uniform 64-bit words (uint64), top bit flipped (see the module docstring), from one
    stream of the source (the noise face's `word_stream`; the zero test source: zeros)."""
    stream = word_stream(source or default_noise_source())
    if stream is None:
        return np.zeros(size, dtype=np.uint64) ^ _TOP
    return np.asarray(stream.words(size, np.uint64), dtype=np.uint64) ^ _TOP


def _word_bounds(table: KeepTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per n: keep if W < below[n] or full[n] (lo = 1); drop if W > above[n]. From
    W + 1 ≤ ⌊lo·2⁶⁴⌋ ⇒ U < lo ≤ p, and W ≥ ⌈hi·2⁶⁴⌉ ⇒ U ≥ hi ≥ p."""
    below, above, full = [], [], []
    for n in range(table.certain + 1):
        lo, hi = table.bounds(n)
        keep_under = math.floor(lo * _WORD)
        drop_from = math.ceil(hi * _WORD)
        full.append(keep_under >= _WORD)
        below.append(min(keep_under, _WORD - 1))
        above.append(min(max(drop_from - 1, 0), _WORD - 1))
    return np.array(below, np.uint64), np.array(above, np.uint64), np.array(full, bool)


def optimal_keep(
    counts: np.ndarray, epsilon: Fraction, delta: Fraction, source: NoiseSource | None
) -> np.ndarray:
    """Keep each key with probability p(n) of the optimal rule at (ε, δ), n its count of units
    (counts ≥ 1: a key nobody holds is never a candidate). A bool mask, in the order given."""
    table = keep_table(epsilon, delta)
    below, above, full = _word_bounds(table)
    index = np.minimum(counts.astype(np.int64), table.certain)
    words = _words(source, index.size)
    keep = (words < below[index]) | full[index]
    drop = words > above[index]
    zero = index == 0  # nobody holds the key (never a candidate): p(0) = 0, always dropped
    drop |= zero
    keep &= ~zero
    undecided = np.flatnonzero(~keep & ~drop)
    for position in undecided.tolist():
        keep[position] = _refine(int(words[position]), int(index[position]), epsilon, delta, source)
    return keep


def _refine(
    word: int, n: int, epsilon: Fraction, delta: Fraction, source: NoiseSource | None
) -> bool:
    """Finish one draw whose first word fell inside p(n)'s interval: more words, more digits."""
    prefix, bits, digits = word, 64, keep_table(epsilon, delta).digits
    while True:
        prefix = (prefix << 64) | int(_words(source, 1)[0] ^ _TOP)
        bits += 64
        digits += _MORE_DIGITS
        lo, hi = keep_table(epsilon, delta, digits).bounds(n)
        scale = 1 << bits
        if (prefix + 1) <= lo * scale:
            return True
        if prefix >= hi * scale:
            return False


def threshold_keep(
    weights: np.ndarray,
    threshold: int,
    noise: Callable[[int, NoiseSource | None], np.ndarray],
    source: NoiseSource | None,
) -> np.ndarray:
    """Keep the keys whose weight plus one exact noise draw each is at least `threshold`."""
    z = noise(weights.size, source)
    return (weights.astype(np.int64) + z) >= threshold


def laplace_noise(scale: Fraction) -> Callable[[int, NoiseSource | None], np.ndarray]:
    return lambda size, source: discrete_laplace(scale, size, source)


def gaussian_noise(sigma2: Fraction) -> Callable[[int, NoiseSource | None], np.ndarray]:
    return lambda size, source: discrete_gaussian(sigma2, size, source)
