"""Exact discrete Laplace noise from a cryptographically secure bit source.

Why integers: floating-point Laplace (`x + b·ln U`) leaks the true value through the gaps in
the set of representable outputs (Mironov 2012). We sample the discrete Laplace
P(Z = z) ∝ exp(−|z|/b) exactly, following Canonne, Kamath & Steinke 2020, "The Discrete
Gaussian for Differential Privacy": Algorithm 1 (Bernoulli(exp(−γ)) for rational γ) and
Algorithm 2 (discrete Laplace with rational scale t/s). The scale is held as an exact rational,
and every random decision is an integer comparison against uniformly random integers; no
floating-point log/exp is involved in sampling.

Why vectorized: a release noises millions of cells at once. Each step of the algorithms runs
on a numpy batch of candidates. Candidates are independent and identically distributed, so
rejection sampling simply keeps the accepted ones in order; the kept values are still iid with
the target law, and surplus complete draws may be discarded. A draw a batch leaves unfinished
(a run of Bernoulli successes still open, a rejected uniform word) is finished with fresh bits,
never dropped or restarted: that would bias its law. Only Algorithm 1's inner loop needs to
track which entries are still pending.

Why the batch ignores the data: callers pass only the number of cells, so nothing about the
cell values can influence how long sampling takes.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

import numpy as np

from dprelease.errors import NoiseError, UnsafeNoiseSourceError
from dprelease.loss import decimal_text

__all__ = [
    "NoiseSource",
    "bernoulli_exp",
    "ci95_halfwidth",
    "default_noise_source",
    "discrete_laplace",
    "exact_scale",
    "require_private",
    "variance",
]

# A float scale becomes t/s with s ≤ 10**6 (rounding adds at most 1e-6, or 2**-47 relative for
# huge scales) and t ≤ 2**48 + 1, so t·k (Algorithm 1, trial k) and U + t·V (Algorithm 2) stay
# far inside int64.
_MAX_DENOMINATOR = 10**6
_MAX_NUMERATOR = 2**48
_MAX_SCALE = Fraction(2**48)
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


# --------------------------------------------------------------------------- scale handling


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
        raise NoiseError(f"scale must be positive, got {decimal_text(exact)}")
    if exact > _MAX_SCALE:  # (Δ/ε can be beyond any double: formatted without float())
        raise NoiseError(f"scale must be at most 2**48 (~2.8e14), got {decimal_text(exact)}")
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


# --------------------------------------------------------------------------- Algorithm 1


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
    starts = range(0, n, _CHUNK)
    # Streams are opened here, in chunk order, so a seeded source is reproducible.
    streams = [_BitStream(src._open_stream(), min(n, _CHUNK) * 16) for _ in starts]

    def fill(start: int, stream: _BitStream) -> None:
        stop = min(start + _CHUNK, n)
        out[start:stop] = _discrete_laplace_batch(stream, t, s, stop - start, accept)

    if len(streams) == 1 or _WORKERS == 1:
        for start, stream in zip(starts, streams, strict=True):
            fill(start, stream)
    else:
        with ThreadPoolExecutor(_WORKERS) as pool:
            list(pool.map(fill, starts, streams))
    return out


# --------------------------------------------------------------------------- reporting helpers


def variance(scale: float | int | Fraction) -> float:
    """Var Z = 2q/(1 − q)², q = exp(−1/b), at the exact scale b used for sampling."""
    x = 1.0 / float(exact_scale(scale))
    return 2.0 * math.exp(-x) / math.expm1(-x) ** 2


def ci95_halfwidth(scale: float | int | Fraction) -> int:
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
