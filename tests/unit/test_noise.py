"""Tests for the exact discrete Laplace sampler.

Statistical tests use fixed seeds, so they are deterministic; each states its false-alarm rate,
i.e. how often it would fail a correct sampler if the seed were drawn at random.
"""

from __future__ import annotations

import math
import tracemalloc
from fractions import Fraction

import numpy as np
import pytest
from helpers import chi2_pvalue_of_pmf, seeded_stream
from scipy import stats

from dprelease.errors import NoiseError, UnsafeNoiseSourceError
from dprelease.mechanism.noise import (
    NoiseSource,
    _bernoulli,
    _laplace,
    _source,
    bernoulli_exp,
    default_noise_source,
    discrete_laplace,
    exact_scale,
    laplace_moe95,
    laplace_variance,
    require_private,
)


def exact_pmf(scale: Fraction, zmax: int) -> tuple[np.ndarray, np.ndarray]:
    """Support −zmax..zmax and P(Z = z) = (1 − q)/(1 + q) · q^|z|, q = exp(−1/b)."""
    z = np.arange(-zmax, zmax + 1)
    x = 1.0 / float(scale)
    pmf = -math.expm1(-x) / (1.0 + math.exp(-x)) * np.exp(-np.abs(z) * x)
    return z, pmf


def chi2_pvalue(draws: np.ndarray, scale: Fraction) -> float:
    """χ² goodness of fit to the exact discrete Laplace pmf at `scale`."""
    return chi2_pvalue_of_pmf(draws, *exact_pmf(scale, int(60 * float(scale)) + 60))


# --------------------------------------------------------------------------- distribution

SCALES = [0.5, 1, 3.7, 100, 10_000]


@pytest.mark.parametrize("scale", SCALES)
def test_chi_square_matches_exact_pmf(scale: float) -> None:
    """False-alarm rate 1e-4 per scale (fail when p < 1e-4)."""
    draws = discrete_laplace(scale, 200_000, NoiseSource.seeded_for_tests(11))
    assert chi2_pvalue(draws, exact_scale(scale)) > 1e-4


@pytest.mark.parametrize("scale", [1, 100])
def test_chi_square_rejects_a_wrong_scale(scale: float) -> None:
    """Power check: draws at 1.1·b are rejected when tested against b (would pass with < 1e-4)."""
    draws = discrete_laplace(1.1 * scale, 200_000, NoiseSource.seeded_for_tests(12))
    assert chi2_pvalue(draws, exact_scale(scale)) < 1e-4


@pytest.mark.parametrize("scale", SCALES)
def test_mean_and_variance(scale: float) -> None:
    """Mean ≈ 0 and variance ≈ 2q/(1−q)², each within 5 standard errors of the sample size
    (false-alarm rate ≈ 6e-7 each under normality)."""
    n = 200_000
    draws = discrete_laplace(scale, n, NoiseSource.seeded_for_tests(13)).astype(np.float64)
    b = exact_scale(scale)
    z, pmf = exact_pmf(b, int(80 * float(b)) + 80)
    var = laplace_variance(scale)
    fourth = float((pmf * z.astype(np.float64) ** 4).sum())
    assert abs(draws.mean()) < 5 * math.sqrt(var / n)
    assert abs(draws.var() - var) < 5 * math.sqrt((fourth - var**2) / n)


@pytest.mark.parametrize("scale", [0.3, 0.5, 1, 3.7, 30, 100, 10_000])
def test_helpers_match_direct_sums_of_the_pmf(scale: float) -> None:
    b = exact_scale(scale)
    z, pmf = exact_pmf(b, int(80 * float(b)) + 80)
    second_moment = float((pmf * z.astype(np.float64) ** 2).sum())
    assert laplace_variance(scale) == pytest.approx(second_moment, 1e-9)
    mass = np.cumsum(pmf[z >= 0] * np.where(z[z >= 0] == 0, 1, 2))  # P(|Z| ≤ h), h = 0, 1, ...
    assert laplace_moe95(scale) == int(np.argmax(mass >= 0.95))


def test_helpers_at_extreme_scales() -> None:
    assert laplace_moe95(0.01) == 0
    assert laplace_variance(0.01) < 1e-40
    # b = 1e9: P(|Z| > h) ≈ exp(−(h+1)/b), so h ≈ b·ln 20.
    assert laplace_moe95(1e9) == pytest.approx(1e9 * math.log(20), rel=1e-6)
    assert laplace_variance(1e9) == pytest.approx(2e18, rel=1e-6)


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2), 7])
def test_bernoulli_exp(gamma: Fraction) -> None:
    """Mean within 5 standard errors of exp(−γ) (false-alarm rate ≈ 6e-7); covers γ > 1."""
    n = 200_000
    draws = bernoulli_exp(gamma, n, NoiseSource.seeded_for_tests(14))
    p = math.exp(-float(gamma))
    assert draws.dtype == bool
    assert abs(draws.mean() - p) <= 5 * math.sqrt(p * (1 - p) / n)


def test_e1_table_is_algorithm_1_at_gamma_1() -> None:
    # Bytes ≥ 240 are rejected (16 codes 3). r = byte mod 120 (each r from two bytes) succeeds iff
    # it has an odd number z of leading zero digits: z = 1 (120/2 − 120/6 = 40 values) or z = 3
    # (120/24 − 120/120 = 4); r = 0 is left to Algorithm 1 from k = 6 (code 2).
    counts = np.bincount(_bernoulli._E1_TABLE, minlength=4)
    assert counts.tolist() == [240 - 88 - 2, 88, 2, 16]
    # P(K = 3) + P(K = 5) = (1/2! − 1/3!) + (1/4! − 1/5!): the settled part of e^{−1}.
    assert Fraction(44, 120) == Fraction(1, 2) - Fraction(1, 6) + Fraction(1, 24) - Fraction(1, 120)


@pytest.mark.parametrize("m", [3, 200, 720, 3000, 40_000, 2**40 + 3])  # 8/16/32/64-bit words
def test_uniform_below_is_uniform(m: int) -> None:
    """χ² over 10 equal-width bins of [0, m); false-alarm rate 1e-4."""
    stream = seeded_stream(15)
    draws = _source._uniform_below(stream, m, 100_000).astype(np.int64)
    assert draws.min() >= 0 and draws.max() < m
    bins = 10 if m > 10 else m
    edges = [m * i // bins for i in range(bins + 1)]
    observed = np.histogram(draws, bins=np.array(edges) - 0.5)[0]
    expected = 100_000 * np.diff(edges) / m
    assert stats.chisquare(observed, expected).pvalue > 1e-4


# --------------------------------------------------------------------------- short passes
# The batched loops size each pass so that one pass almost always suffices; a short pass must be
# exact too. These tests set _MARGIN = 0 so every pass draws only _PAD items, far short of the
# need: runs of Bernoulli(exp(−1)) successes straddle passes and the loops refill many times.


@pytest.fixture
def short_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_source, "_MARGIN", 0.0)
    monkeypatch.setattr(_source, "_PAD", 16)


def geometric_chi2_pvalue(v: np.ndarray) -> float:
    """χ² of V against P(V = v) = (1 − q)q^v, q = e^−1: cells 0..K−1 and V ≥ K, where K is the
    largest value with expected count n·q^K ≥ 5."""
    n, q = v.size, math.exp(-1.0)
    top = int(math.log(n / 5))
    expected = n * np.append((1 - q) * q ** np.arange(top), q**top)
    observed = np.bincount(np.minimum(v, top), minlength=top + 1)
    return float(stats.chisquare(observed, expected).pvalue)


def test_open_run_is_carried_into_the_next_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scripted Bernoulli(exp(−1)) stream read two draws per pass: the first run (7 successes)
    spans four passes, three of them without a failure; the third run starts in one pass and
    ends in a later one. Dropping the open run at each pass's end would give [1, 0, 0]."""
    script = [True] * 7 + [False, False] + [True] * 3 + [False] + [True] * 9
    passes: list[int] = []

    def scripted(stream: object, n: int) -> np.ndarray:
        start = sum(passes)
        passes.append(n)
        return np.array(script[start : start + n], dtype=bool)

    monkeypatch.setattr(_bernoulli, "_bern_exp1", scripted)
    monkeypatch.setattr(_source, "_MARGIN", 0.0)
    monkeypatch.setattr(_source, "_PAD", 2)
    v = _bernoulli._geometric_e1(None, 3)  # type: ignore[arg-type]
    assert v.tolist() == [7, 0, 3]
    assert passes == [2] * 7  # read exactly up to the third failure, two draws at a time


@pytest.mark.usefixtures("short_passes")
def test_geometric_is_exact_with_short_passes() -> None:
    """False-alarm rate 1e-4 (fail when p < 1e-4)."""
    stream = seeded_stream(31)
    v = _bernoulli._geometric_e1(stream, 200_000)
    assert v.min() >= 0
    assert geometric_chi2_pvalue(v) > 1e-4


@pytest.mark.usefixtures("short_passes")
@pytest.mark.parametrize("scale", [0.5, 1, 3.7, 10])
def test_chi_square_matches_exact_pmf_with_short_passes(scale: float) -> None:
    """False-alarm rate 1e-4 per scale (fail when p < 1e-4)."""
    draws = discrete_laplace(scale, 100_000, NoiseSource.seeded_for_tests(32))
    assert chi2_pvalue(draws, exact_scale(scale)) > 1e-4


def test_a_pass_with_no_accepted_candidate(monkeypatch: pytest.MonkeyPatch) -> None:
    """One candidate per pass, so many passes accept no U and ask for zero geometric draws.
    At the real pass sizes it is rare (below 1e-27 per pass) but possible, and must not fail."""
    monkeypatch.setattr(_source, "_MARGIN", 0.0)
    monkeypatch.setattr(_source, "_PAD", 1)
    sizes: list[int] = []
    real = _laplace._geometric_e1

    def spy(stream: _source._BitStream, n: int) -> np.ndarray:
        sizes.append(n)
        return real(stream, n)

    monkeypatch.setattr(_laplace, "_geometric_e1", spy)
    draws = discrete_laplace(1000, 200, NoiseSource.seeded_for_tests(33))
    assert 0 in sizes
    assert draws.shape == (200,) and np.unique(draws).size > 100


# --------------------------------------------------------------------------- scales and sizes


def test_exact_scale_keeps_exact_values() -> None:
    assert exact_scale(10.0) == 10
    assert exact_scale(0.5) == Fraction(1, 2)
    assert exact_scale(Fraction(7, 3)) == Fraction(7, 3)
    assert exact_scale(np.int64(3)) == 3
    assert exact_scale(np.float64(2.5)) == Fraction(5, 2)
    assert exact_scale(1e9) == 10**9


@pytest.mark.parametrize("scale", [3.7, 0.01, 1 / 0.347, math.pi * 1e7, 1e-9, 2.0**48])
def test_exact_scale_rounds_up_with_bounded_terms(scale: float) -> None:
    b, asked = exact_scale(scale), Fraction(scale)
    assert b >= asked
    assert b.denominator <= 10**6 and b.numerator <= 2**48 + 1
    assert b - asked <= max(Fraction(1, 10**6), asked / 2**47)


def test_round_up_is_the_best_upper_approximation() -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        x = Fraction(int(rng.integers(1, 10**9)), int(rng.integers(1, 10**9)))
        max_den = int(rng.integers(1, 60))
        best = min(Fraction(math.ceil(x * q), q) for q in range(1, max_den + 1))
        assert _laplace._round_up(x, max_den) == best


@pytest.mark.parametrize(
    "scale", [0, -1, -0.5, float("nan"), float("inf"), -float("inf"), "1", None, True, 1j, 1e15]
)
def test_invalid_scale_names_scale(scale: object) -> None:
    with pytest.raises(NoiseError, match="scale"):
        discrete_laplace(scale, 3)  # type: ignore[arg-type]
    with pytest.raises(NoiseError, match="scale"):
        exact_scale(scale)  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [-1, 1.5, "3", None, True])
def test_invalid_size_names_size(size: object) -> None:
    with pytest.raises(NoiseError, match="size"):
        discrete_laplace(1, size)  # type: ignore[arg-type]


def test_size_zero_and_dtype() -> None:
    empty = discrete_laplace(1, 0)
    assert empty.dtype == np.int64 and empty.shape == (0,)
    draws = discrete_laplace(2.5, np.int64(1000))
    assert draws.dtype == np.int64 and draws.shape == (1000,)
    assert np.unique(draws).size > 5


def test_tiny_scale_is_almost_surely_zero() -> None:
    # P(Z ≠ 0) = 2q/(1+q) with q = e^−100: any nonzero draw means a broken sampler.
    assert not discrete_laplace(0.01, 100_000, NoiseSource.seeded_for_tests(16)).any()


def test_huge_scale() -> None:
    """b = 1e9: mean within 5 standard errors (false-alarm rate ≈ 6e-7), sane spread."""
    n = 100_000
    draws = discrete_laplace(1e9, n, NoiseSource.seeded_for_tests(17)).astype(np.float64)
    assert abs(draws.mean()) < 5 * math.sqrt(2e18 / n)
    assert draws.std() == pytest.approx(math.sqrt(2e18), rel=0.05)
    assert (np.abs(draws) > 1e9 * math.log(20)).mean() == pytest.approx(0.05, abs=0.005)


def test_ten_million_draws_stay_memory_bounded() -> None:
    tracemalloc.start()
    try:
        draws = discrete_laplace(30, 10**7, NoiseSource.seeded_for_tests(18))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert draws.shape == (10**7,)
    assert peak < draws.nbytes + 150 * 2**20  # the output itself plus bounded working memory
    assert abs(draws.mean()) < 5 * math.sqrt(laplace_variance(30) / 10**7)


# --------------------------------------------------------------------------- sources


def test_default_source_is_the_os_csprng(monkeypatch: pytest.MonkeyPatch) -> None:
    source = default_noise_source()
    assert source.bit_source == "os.urandom" and not source.is_seeded
    require_private(source)
    requested: list[int] = []
    real_urandom = _source.os.urandom

    def spy(nbytes: int) -> bytes:
        requested.append(nbytes)
        return real_urandom(nbytes)

    monkeypatch.setattr(_source.os, "urandom", spy)
    discrete_laplace(3, 1000)
    assert requested, "the default path must read os.urandom"


def test_seeded_sources_are_reproducible_and_refused_on_release_paths() -> None:
    a, b = NoiseSource.seeded_for_tests(5), NoiseSource.seeded_for_tests(5)
    first = discrete_laplace(10, 1000, a)
    assert np.array_equal(first, discrete_laplace(10, 1000, b))
    assert not np.array_equal(first, discrete_laplace(10, 1000, a))  # the stream moves on
    for source in (a, NoiseSource.zero_for_tests()):
        assert source.is_seeded
        with pytest.raises(UnsafeNoiseSourceError):
            require_private(source)
        require_private(source, allow_unsafe=True)


def test_seeded_draws_are_reproducible_across_parallel_chunks() -> None:
    size = 3 * _source._CHUNK + 5  # several chunks, sampled on worker threads
    first = discrete_laplace(7, size, NoiseSource.seeded_for_tests(6))
    second = discrete_laplace(7, size, NoiseSource.seeded_for_tests(6))
    assert np.array_equal(first, second)
    chunks = first[: 3 * _source._CHUNK].reshape(3, -1)
    assert not np.array_equal(chunks[0], chunks[1])  # each chunk has its own stream


def test_zero_source_draws_zeros() -> None:
    assert not discrete_laplace(1000, 50, NoiseSource.zero_for_tests()).any()


def test_sources_only_from_named_constructors() -> None:
    with pytest.raises(TypeError):
        NoiseSource("os.urandom", False, None)
    with pytest.raises(NoiseError, match="source"):
        discrete_laplace(1, 3, "urandom")  # type: ignore[arg-type]
