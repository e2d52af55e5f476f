"""Where noise bits come from, and the integer primitives every exact sampler is built on.

`NoiseSource` names the bit source (the OS CSPRNG in production, seeded streams in tests).
`_BitStream` serves random words, nibbles and bits from one source stream, `_uniform_below`
turns words into exactly uniform integers by rejection, `_draw_in_chunks` runs a sampler on
chunks of the output in parallel and `_fill_in_passes` fills a chunk with a rejection sampler's
kept draws. Nothing here is specific to one distribution.

Where the time goes (profiled at 10**7 draws): the OS CSPRNG yields a few hundred MB/s, so a
random byte costs about as much as several numpy passes; and numpy's fixed cost per call, and
page faults when glibc returns freed temporaries to the OS, punish small batches and large
temporaries alike. Hence: no random byte is wasted, comparisons draw only the bits they need,
chunks are mid-sized, and the samplers avoid large intermediate arrays (boolean indexing,
`np.where` and `%` are replaced by `compress`, bit tricks and quotients; methods rather than
numpy's Python-level wrappers, whose cost shows on the many small arrays of rare branches).
"""

from __future__ import annotations

import functools
import math
import numbers
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from dprelease.errors import NoiseError, UnsafeNoiseSourceError

# Output draws per chunk: memory is bounded whatever the requested size (a chunk's working
# arrays take a few MiB per thread). 2**18 rather than 2**16: fewer numpy calls per draw and
# longer stretches without the GIL (docs/performance.md, "Noise": 0.95x a whole process's time).
_CHUNK = 1 << 18
# Bytes read from the source at a time: large enough that the cost of a call is small against
# the bytes it returns, small enough that the bytes a chunk leaves unused are few.
_BLOCK = 1 << 14

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


def _draw_in_chunks(
    source: NoiseSource | None, size: int, fill: Callable[[_BitStream, np.ndarray], None]
) -> np.ndarray:
    """`size` int64 draws: `fill(stream, out)` fills each chunk of `_CHUNK` draws from its own
    stream. NoiseError for a size or a source no sampler can take (None: the system source).

    Streams are opened here, in chunk order, so a seeded source is reproducible; chunks then run
    on `_WORKERS` threads. The zero test source gives zeros without calling `fill`.
    """
    n = _check_size(size)
    source = _check_source(source)
    if source._open_stream is None:
        return np.zeros(n, dtype=np.int64)
    out = np.empty(n, dtype=np.int64)
    starts = range(0, n, _CHUNK)
    streams = [_BitStream(source._open_stream()) for _ in starts]

    def fill_chunk(start: int, stream: _BitStream) -> None:
        fill(stream, out[start : start + _CHUNK])

    if len(streams) <= 1 or _WORKERS == 1:
        for start, stream in zip(starts, streams, strict=True):
            fill_chunk(start, stream)
    else:
        with ThreadPoolExecutor(_WORKERS) as pool:
            list(pool.map(fill_chunk, starts, streams))
    return out


def _pass_size(expected: float) -> int:
    """How many draws one pass of a batched loop makes when `expected` would just suffice."""
    return math.ceil(expected * _MARGIN) + _PAD


def _fill_in_passes(out: np.ndarray, accept: float, kept_of: Callable[[int], np.ndarray]) -> None:
    """Fill `out` with a rejection sampler's draws: `kept_of(m)` draws m candidates and returns
    the kept ones in order, about `accept`·m of them.

    Candidates are iid, so keeping the first accepted ones, pass after pass, is exact; the
    surplus of the last pass is complete draws, so dropping it does not bias the law.
    """
    have = 0
    while have < out.size:
        z = kept_of(_pass_size((out.size - have) / accept))
        take = min(z.size, out.size - have)
        out[have : have + take] = z[:take]
        have += take


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
    """Serves random words from one source stream, read in blocks of about `_BLOCK` bytes.

    Random bytes are the main cost of sampling (the OS CSPRNG yields a few hundred MB/s), so
    none is wasted: a request larger than what is left of the block takes the rest of the block
    and reads only what it lacks. One stream serves one chunk of one sampling call; the bytes
    left at its end die with it, never reused.
    """

    def __init__(self, reader: _RawReader) -> None:
        self._reader = reader
        self._buf = np.empty(0, dtype=np.uint8)
        self._pos = 0

    def _take(self, nbytes: int) -> np.ndarray:
        left = self._buf.size - self._pos
        if nbytes > left:
            fresh = self._reader(max(nbytes - left, _BLOCK))
            self._buf = np.concatenate([self._buf[self._pos :], fresh]) if left else fresh
            self._pos = 0
        out = self._buf[self._pos : self._pos + nbytes]
        self._pos += nbytes
        return out

    def words(self, n: int, dtype: type[np.unsignedinteger]) -> np.ndarray:
        """n uniformly random words of `dtype`."""
        if dtype is np.uint8:
            return self._take(n)
        # Skip to an 8-byte boundary so the view is aligned; the skipped bytes are never used.
        self._pos = min(self._pos + -self._pos % 8, self._buf.size)
        return self._take(n * np.dtype(dtype).itemsize).view(dtype)

    def nibbles(self, n: int) -> np.ndarray:
        """n uniform integers below 16 (uint8), two from each random byte."""
        raw = self._take(-(-n // 2))
        out = np.empty(2 * raw.size, dtype=np.uint8)
        np.bitwise_and(raw, 15, out=out[: raw.size])
        np.right_shift(raw, 4, out=out[raw.size :])
        return out[:n]

    def bits(self, n: int) -> np.ndarray:
        """n fair coin flips as a bool array."""
        return np.unpackbits(self._take(-(-n // 8)), count=n).view(bool)


@functools.cache
def _word_for(m: int) -> tuple[type[np.unsignedinteger], int]:
    """The narrowest word whose rejection rate for uniforms below m is at most 1/8, and the
    number of its values that map to each integer below m (the quotient step)."""
    for dtype in (np.uint8, np.uint16, np.uint32, np.uint64):
        span = 1 << (8 * np.dtype(dtype).itemsize)
        if m <= span and 8 * (span % m) <= span:
            return dtype, span // m
    raise NoiseError(f"internal: modulus {m} exceeds 64 bits")


def _uniform_words(stream: _BitStream, m: int, n: int) -> tuple[np.ndarray, np.ndarray | None]:
    """n uniform integers below m, and a mask of the ones to keep (None: keep all).

    A word w is kept only below m·q, the largest multiple of m it can hold; then w // q is
    exactly uniform below m (each value has q preimages). Values where the mask is False are
    meaningless: a caller drops them, which only thins a stream of iid candidates.
    Division by a constant is cheap in numpy; `%` is not.
    """
    dtype, q = _word_for(m)
    raw = stream.words(n, dtype)
    span = 1 << (8 * np.dtype(dtype).itemsize)
    if m * q == span:  # m is a power of two: nothing to reject
        return raw // dtype(q) if q > 1 else raw, None
    return raw // dtype(q), raw < dtype(m * q)


def _uniform_below(stream: _BitStream, m: int, n: int) -> np.ndarray:
    """n independent uniform integers in [0, m) (m < 2**64), each rejected word redrawn."""
    if m == 1:
        return np.zeros(n, dtype=np.int64)
    out, keep = _uniform_words(stream, m, n)
    if keep is None:
        return out
    out = out.copy()
    bad = (~keep).nonzero()[0]
    while bad.size:
        fresh, fresh_keep = _uniform_words(stream, m, bad.size)
        out[bad] = fresh
        bad = bad[~fresh_keep]  # type: ignore[operator]
    return out


def _python_uniform_below(stream: _BitStream, m: int) -> int:
    """One uniform integer in [0, m) as a Python int, for any m ≥ 1 (exact rejection)."""
    bits = max(1, (m - 1).bit_length())
    nbytes = -(-bits // 8)
    while True:
        word = int.from_bytes(stream.words(nbytes, np.uint8).tobytes(), "little")
        word &= (1 << bits) - 1
        if word < m:
            return word


def word_stream(source: NoiseSource) -> _BitStream | None:
    """A fresh stream of the source's random words, for a sampler outside this folder that
    needs uniform words of its own (a uniform choice among a data-dependent number of points);
    None for the zero test source, which has no bits."""
    if source._open_stream is None:
        return None
    return _BitStream(source._open_stream())


#: The public name of a stream of random words (`word_stream`): `words(n, dtype)`.
WordStream = _BitStream
