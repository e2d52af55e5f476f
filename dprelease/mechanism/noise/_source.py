"""Where noise bits come from, and the integer primitives every exact sampler is built on.

`NoiseSource` names the bit source (the OS CSPRNG in production, seeded streams in tests).
`_BitStream` serves random words from one source stream, and `_uniform_below` turns them into
exactly uniform integers by rejection. Nothing here is specific to one distribution.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable

import numpy as np

from dprelease.errors import NoiseError, UnsafeNoiseSourceError

# Output draws per chunk: working memory is a few tens of MB per chunk in flight, whatever the
# requested size.
_CHUNK = 1 << 18

# Chunks are sampled on a few threads: numpy and os.urandom release the GIL.
_WORKERS = min(4, os.cpu_count() or 1)
# A pass of a batched loop draws its expected need × _MARGIN + _PAD, so one pass almost always
# suffices. A short pass is exact too, only slower (the next pass continues where it stopped);
# tests shrink these to force short passes.
_MARGIN = 1.02
_PAD = 64

_RawReader = Callable[[int], np.ndarray]
_CONSTRUCTOR_KEY = object()


class NoiseSource:
    """Where the random bits come from. Build one only with the named constructors.

    `system()` reads the operating system's CSPRNG (`os.urandom`, i.e. getrandom(2)) in blocks
    during each sampling call; leftover bytes die with the call and are never reused, so a
    forked process cannot replay its parent's noise and there is no key to re-seed after fork.
    `seeded_for_tests` and `zero_for_tests` exist so tests are reproducible; they set
    `is_seeded`, and `require_private` refuses them on a release path.

    Internally a source opens one independent stream per chunk of work, so chunks can be
    sampled in parallel and a seeded source still gives the same draws every run.
    """

    bit_source: str
    is_seeded: bool

    def __init__(
        self,
        bit_source: str,
        is_seeded: bool,
        open_stream: Callable[[], _RawReader] | None,
        *,
        _key: object = None,
    ) -> None:
        if _key is not _CONSTRUCTOR_KEY:
            raise TypeError(
                "build a NoiseSource with NoiseSource.system(), .seeded_for_tests() or "
                ".zero_for_tests(); the constructor is private so a seeded stream cannot be "
                "labelled as private"
            )
        self.bit_source = bit_source
        self.is_seeded = is_seeded
        self._open_stream = open_stream

    @classmethod
    def system(cls) -> NoiseSource:
        """The production source: the OS CSPRNG."""
        return cls("os.urandom", False, lambda: _read_urandom, _key=_CONSTRUCTOR_KEY)

    @classmethod
    def seeded_for_tests(cls, seed: int) -> NoiseSource:
        """A reproducible stream (numpy Philox keyed by `seed`). NOT private: tests only."""
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise NoiseError(f"seed must be a non-negative integer, got {seed!r}")
        seeds = np.random.SeedSequence(int(seed))

        def open_stream() -> _RawReader:
            bit_generator = np.random.Philox(seeds.spawn(1)[0])

            def read(nbytes: int) -> np.ndarray:
                return bit_generator.random_raw(-(-nbytes // 8)).view(np.uint8)[:nbytes]

            return read

        name = f"philox(seed={int(seed)}) [test-only]"
        return cls(name, True, open_stream, _key=_CONSTRUCTOR_KEY)

    @classmethod
    def zero_for_tests(cls) -> NoiseSource:
        """Every draw is 0, so tests can see exact pre-noise aggregates. NOT private."""
        return cls("zero [test-only]", True, None, _key=_CONSTRUCTOR_KEY)

    def __repr__(self) -> str:
        return f"NoiseSource(bit_source={self.bit_source!r}, is_seeded={self.is_seeded})"


def _read_urandom(nbytes: int) -> np.ndarray:
    return np.frombuffer(os.urandom(nbytes), dtype=np.uint8)


_SYSTEM_SOURCE = NoiseSource.system()


def default_noise_source() -> NoiseSource:
    """The source production code gets when it passes none: the OS CSPRNG."""
    return _SYSTEM_SOURCE


def require_private(source: NoiseSource, *, allow_unsafe: bool = False) -> None:
    """Refuse a seeded or zero source on a release path unless the caller explicitly allows it."""
    if source.is_seeded and not allow_unsafe:
        raise UnsafeNoiseSourceError(
            f"noise source {source.bit_source!r} is seeded (test-only): anything released with "
            "it is NOT private. Use the default system source, or pass allow_unsafe=True in "
            "tests and mark the output as not private."
        )


def _pass_size(expected: float) -> int:
    """How many draws one pass of a batched loop makes when `expected` would just suffice."""
    return math.ceil(expected * _MARGIN) + _PAD


def _check_size(size: int) -> int:
    if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 0:
        raise NoiseError(f"size must be a non-negative integer, got {size!r}")
    return int(size)


def _check_source(source: NoiseSource | None) -> NoiseSource:
    if source is None:
        return _SYSTEM_SOURCE
    if not isinstance(source, NoiseSource):
        raise NoiseError(f"source must be a NoiseSource, got {type(source).__name__}")
    return source


# --------------------------------------------------------------------------- random integers


class _BitStream:
    """Serves random words from a source, reading it in large blocks to save syscalls.

    One stream serves one chunk of one sampling call; unused bytes die with it, never reused.
    """

    def __init__(self, reader: _RawReader, block_bytes: int) -> None:
        self._reader = reader
        self._block = min(max(block_bytes, 4096), 1 << 21)
        self._buf = np.empty(0, dtype=np.uint8)
        self._pos = 0

    def words(self, n: int, dtype: type[np.unsignedinteger]) -> np.ndarray:
        """n uniformly random words of `dtype` (read-only view)."""
        nbytes = n * np.dtype(dtype).itemsize
        if self._pos + nbytes > self._buf.size:
            self._buf = self._reader(max(nbytes, self._block))
            self._pos = 0
        out = self._buf[self._pos : self._pos + nbytes].view(dtype)
        self._pos += -(-nbytes // 8) * 8  # keep every view 8-byte aligned
        return out

    def bits(self, n: int) -> np.ndarray:
        """n fair coin flips as a bool array."""
        return np.unpackbits(self.words(-(-n // 8), np.uint8), count=n).view(bool)


def _uniform_below(stream: _BitStream, m: int, n: int) -> np.ndarray:
    """n independent uniform integers in [0, m).

    Exact rejection: a word w from [0, 2**width) is kept only below the largest multiple of m,
    and then w % m is exactly uniform. The narrowest word whose rejection rate is ≤ 1/8 is
    used, because random bytes are the main cost of sampling.
    """
    if m == 1:
        return np.zeros(n, dtype=np.int64)
    if m >= 1 << 64:  # probability < 2**-900000, data-independent: see _alg1_continue
        raise NoiseError(f"internal: modulus {m} exceeds 64 bits")
    dtype: type[np.unsignedinteger] = np.uint64
    for candidate in (np.uint8, np.uint16, np.uint32):
        span = 1 << (8 * np.dtype(candidate).itemsize)
        if m < span and 8 * (span % m) <= span:
            dtype = candidate
            break
    span = 1 << (8 * np.dtype(dtype).itemsize)
    limit = span - span % m
    raw = stream.words(n, dtype)
    out = raw % dtype(m)
    if limit == span:  # m is a power of two: nothing to reject
        return out
    bad = np.flatnonzero(raw >= dtype(limit))
    while bad.size:
        fresh = stream.words(bad.size, dtype)
        out[bad] = fresh % dtype(m)
        bad = bad[fresh >= dtype(limit)]
    return out
