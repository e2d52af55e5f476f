"""Exact random decisions from a stream of random bytes: the algorithms both randomizers run.

The Python randomizers and the JavaScript module (`randomize.js`) run these same algorithms and
read the same bytes in the same order, so fed one byte stream they give identical reports (a
test does exactly that). Every decision is a comparison of integers; no probability is ever a
float:

* `uniform(m)`: an integer uniform below m. Read ⌈L/8⌉ bytes (L = bit length of m − 1) as a
  little-endian integer, keep its low L bits, and start again if that is m or more: each value
  below m has exactly one bit pattern, so the draws kept are uniform (at most half rejected).
* `bernoulli(num, den)`: [uniform(den) < num], probability num/den exactly.
* `bernoulli_exp(γ)`: probability e^(−γ) for a rational γ ≥ 0 (Canonne, Kamath & Steinke 2020,
  Algorithm 1): for γ ≤ 1, draw A_k ~ Bernoulli(γ/k) for k = 1, 2, … until the first A_k = 0 at
  trial K, and answer [K odd]; P(K > k) = γ^k/k!, so P(K odd) = Σ (−γ)^j/j! = e^(−γ). A larger
  γ is ⌊γ⌋ draws at γ = 1 followed by one at γ − ⌊γ⌋, all of which must succeed.
* `keep_or_other(v, k, γ)`: k-ary randomized response, the two-coin Bernoulli factory. Propose
  u = uniform(k); return u if u = v, else return u with probability e^(−γ), else propose again.
  Each round returns v with probability 1/k and a given other value w with (1/k)·e^(−γ), so the
  answer is v with probability 1/(1 + (k − 1)e^(−γ)) = e^γ/(e^γ + k − 1) and each other value
  with 1/(e^γ + k − 1): k-RR's law exactly, with its "keep" coin and its uniform replacement
  drawn together.
* `bernoulli_one_over_one_plus_exp(γ)`: probability 1/(1 + e^γ) = e^(−γ)/(e^(−γ) + 1), a
  two-coin factory: a fair bit chooses a coin, Bernoulli(e^(−γ)) ("1") or the sure coin ("0");
  the first coin that shows heads decides, a tail starts again. Each round answers 1 with
  probability e^(−γ)/2 and 0 with 1/2.

The expected number of bytes per decision is small and does not depend on the answer's secret
beyond what the output shows; the randomizers run on the respondent's device, where timing is
not observed by the agency.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

from dprelease.errors import NoiseError
from dprelease.mechanism.noise import NoiseSource, default_noise_source, require_private

#: Bytes read from the source at a time; the bytes a stream leaves unused die with it.
_BLOCK = 4096


class ByteStream:
    """Random bytes served in order from a reader (`read(n)` returns n fresh bytes).

    Reading in blocks keeps the cost of a call to the source (the OS CSPRNG) small against the
    few bytes a decision needs; the bytes are used in exactly the order the reader gives them.
    """

    def __init__(self, read: Callable[[int], bytes], block: int = _BLOCK) -> None:
        self._read = read
        self._block = block
        self._buffer = b""
        self._position = 0

    def byte(self) -> int:
        """The next byte of the stream, as an integer (the common case: one byte at a time)."""
        if self._position >= len(self._buffer):
            self._buffer, self._position = self._read(self._block), 0
        value = self._buffer[self._position]
        self._position += 1
        return value

    def take(self, n: int) -> bytes:
        """The next n bytes of the stream."""
        end = self._position + n
        if end > len(self._buffer):
            rest = self._buffer[self._position :]
            self._buffer = rest + self._read(max(self._block, n - len(rest)))
            self._position, end = 0, n
        out = self._buffer[self._position : end]
        self._position = end
        return out


def uniform(stream: ByteStream, m: int) -> int:
    """An integer uniform in [0, m), m ≥ 1: the low L bits of ⌈L/8⌉ little-endian bytes, L the
    bit length of m − 1, rejected while they are m or more. m = 1 reads nothing."""
    if m < 1:
        raise ValueError(f"uniform needs m >= 1, got {m}")
    bits = (m - 1).bit_length()
    if bits == 0:
        return 0
    mask = (1 << bits) - 1
    if bits <= 8:  # one byte a try: the same bytes as below, read faster
        while True:
            word = stream.byte() & mask
            if word < m:
                return word
    nbytes = (bits + 7) // 8
    while True:
        word = int.from_bytes(stream.take(nbytes), "little") & mask
        if word < m:
            return word


def bernoulli(stream: ByteStream, num: int, den: int) -> bool:
    """True with probability num/den exactly (0 ≤ num ≤ den)."""
    return uniform(stream, den) < num


def _bernoulli_exp_at_most_one(stream: ByteStream, num: int, den: int) -> bool:
    """True with probability e^(−num/den) for 0 ≤ num ≤ den (Algorithm 1: [K odd])."""
    k = 1
    while bernoulli(stream, num, den * k):
        k += 1
    return k % 2 == 1


def bernoulli_exp(stream: ByteStream, gamma: Fraction) -> bool:
    """True with probability e^(−γ) exactly, for a rational γ ≥ 0 (in lowest terms, as
    `Fraction` keeps it: the denominators drawn below depend on it, in both languages)."""
    if gamma < 0:
        raise ValueError(f"bernoulli_exp needs gamma >= 0, got {gamma}")
    whole, rest = divmod(gamma.numerator, gamma.denominator)
    for _ in range(whole):
        if not _bernoulli_exp_at_most_one(stream, 1, 1):
            return False
    return _bernoulli_exp_at_most_one(stream, rest, gamma.denominator)


def keep_or_other(stream: ByteStream, value: int, k: int, gamma: Fraction) -> int:
    """k-ary randomized response of `value` (an index below k): `value` with probability
    e^γ/(e^γ + k − 1), each other index with 1/(e^γ + k − 1) (see the module docstring)."""
    while True:
        proposal = uniform(stream, k)
        if proposal == value or bernoulli_exp(stream, gamma):
            return proposal


def bernoulli_one_over_one_plus_exp(stream: ByteStream, gamma: Fraction) -> bool:
    """True with probability 1/(1 + e^γ) exactly (see the module docstring)."""
    while True:
        if uniform(stream, 2) == 1:
            return False
        if bernoulli_exp(stream, gamma):
            return True


def byte_reader(
    source: NoiseSource | None, *, allow_unsafe_noise: bool = False
) -> Callable[[int], bytes]:
    """Fresh random bytes from `source` (default: the OS CSPRNG); a seeded test source only
    with `allow_unsafe_noise` (production never randomizes with a fixed seed)."""
    chosen = source or default_noise_source()
    if not isinstance(chosen, NoiseSource):
        raise NoiseError(f"source must be a NoiseSource, got {type(chosen).__name__}")
    require_private(chosen, allow_unsafe=allow_unsafe_noise)
    if chosen._open_stream is None:
        raise NoiseError("source: the zero test source gives no random bytes to randomize with")
    read = chosen._open_stream()
    return lambda n: read(n).tobytes()
