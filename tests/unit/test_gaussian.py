"""Tests for the exact discrete Gaussian sampler and its Bernoulli building blocks.

Statistical tests use fixed seeds, so they are deterministic; each states its false-alarm rate,
i.e. how often it would fail a correct sampler if the seed were drawn at random.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from helpers import chi2_pvalue_of_pmf, seeded_stream
from scipy import stats

from dprelease.errors import NoiseError
from dprelease.mechanism.noise import (
    NoiseSource,
    _bernoulli,
    _gaussian,
    _gaussian_law,
    _source,
    bernoulli_exp,
    discrete_gaussian,
    exact_sigma2,
    gaussian_law,
    gaussian_moe95,
    gaussian_variance,
)


def exact_pmf(sigma2: Fraction, zmax: int) -> tuple[np.ndarray, np.ndarray]:
    """Support −zmax..zmax and P(Z = z) = e^{−z²/(2σ²)} / Σ_z e^{−z²/(2σ²)} (zmax ≫ σ)."""
    z = np.arange(-zmax, zmax + 1)
    weights = np.exp(-(z.astype(np.float64) ** 2) / (2.0 * float(sigma2)))
    return z, weights / math.fsum(weights)


def support(sigma2: Fraction) -> int:
    return int(40 * math.sqrt(float(sigma2))) + 40


def chi2_pvalue(draws: np.ndarray, sigma2: Fraction) -> float:
    """χ² goodness of fit to the exact discrete Gaussian pmf at `sigma2`."""
    return chi2_pvalue_of_pmf(draws, *exact_pmf(sigma2, support(sigma2)))


# --------------------------------------------------------------------------- distribution

SIGMA2S = [Fraction(3, 10), Fraction(1), Fraction(7, 3), Fraction(121, 4), 900, Fraction(30001, 3)]


@pytest.mark.parametrize("sigma2", SIGMA2S)
def test_chi_square_matches_exact_pmf(sigma2: Fraction) -> None:
    """False-alarm rate 1e-4 per σ² (fail when p < 1e-4); σ² = 7/3, 121/4 and 30001/3 are not
    integers, and their σ²/t have denominators 6, 24 and 174 (t = ⌈σ⌉ = 2, 6, 58)."""
    assert exact_sigma2(sigma2) == sigma2
    draws = discrete_gaussian(sigma2, 200_000, NoiseSource.seeded_for_tests(41))
    assert chi2_pvalue(draws, Fraction(sigma2)) > 1e-4


@pytest.mark.parametrize("sigma2", [1, 900])
def test_chi_square_rejects_a_wrong_sigma(sigma2: int) -> None:
    """Power check: draws at 1.1·σ² are rejected when tested against σ² (would pass with < 1e-4)."""
    draws = discrete_gaussian(Fraction(11, 10) * sigma2, 200_000, NoiseSource.seeded_for_tests(42))
    assert chi2_pvalue(draws, Fraction(sigma2)) < 1e-4


@pytest.mark.parametrize("sigma2", [*SIGMA2S, Fraction(9_000_000)])
def test_mean_and_variance(sigma2: Fraction) -> None:
    """Mean ≈ 0 and sample variance ≈ gaussian_variance, each within 5 standard errors
    (false-alarm rate ≈ 6e-7 each under normality); the variance is below σ²."""
    n = 200_000
    draws = discrete_gaussian(sigma2, n, NoiseSource.seeded_for_tests(43)).astype(np.float64)
    var = gaussian_variance(sigma2)
    z, pmf = exact_pmf(Fraction(sigma2), support(Fraction(sigma2)))
    fourth = math.fsum(pmf * z.astype(np.float64) ** 4)
    assert var <= float(sigma2)
    assert abs(draws.mean()) < 5 * math.sqrt(var / n)
    assert abs(draws.var() - var) < 5 * math.sqrt((fourth - var**2) / n)


@pytest.mark.parametrize("sigma2", [Fraction(1), Fraction(121, 4)])
def test_symmetry(sigma2: Fraction) -> None:
    """Positive and negative draws are equally frequent, and |Z| has the same law on both sides:
    binomial test p > 1e-4 and a two-sample χ² of |Z| by sign p > 1e-4 (false alarm 2e-4)."""
    draws = discrete_gaussian(sigma2, 200_000, NoiseSource.seeded_for_tests(44))
    positive, negative = draws[draws > 0], -draws[draws < 0]
    assert stats.binomtest(positive.size, positive.size + negative.size).pvalue > 1e-4
    top = int(np.quantile(positive, 0.999))  # |Z| = 1, 2, …, top − 1 and ≥ top
    table = np.array(
        [np.bincount(np.minimum(side, top) - 1, minlength=top) for side in (positive, negative)]
    )
    assert stats.chi2_contingency(table).pvalue > 1e-4


def test_wide_roots_take_python_integers_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    """|Y|·E − P ≥ 2**32 (|Y| > 63t, probability ≈ e^{−63}) is squared with Python integers.
    Forcing that path for every |Y|·E − P ≥ 64 must keep the exact law: χ² p > 1e-4
    (false-alarm rate 1e-4)."""
    monkeypatch.setattr(_gaussian, "_FAST_ROOT", 64)
    sigma2 = Fraction(121, 4)  # t = 6, E = 24, P = 121: |Y|·E − P ≥ 64 for most draws
    draws = discrete_gaussian(sigma2, 20_000, NoiseSource.seeded_for_tests(51))
    assert chi2_pvalue(draws, sigma2) > 1e-4


# --------------------------------------------------------------------------- sources and sizes


def test_seeded_source_is_reproducible_across_parallel_chunks() -> None:
    size = 3 * _source._CHUNK + 5  # several chunks, sampled on worker threads
    first = discrete_gaussian(Fraction(7, 3), size, NoiseSource.seeded_for_tests(45))
    assert np.array_equal(
        first, discrete_gaussian(Fraction(7, 3), size, NoiseSource.seeded_for_tests(45))
    )
    assert not np.array_equal(
        first, discrete_gaussian(Fraction(7, 3), size, NoiseSource.seeded_for_tests(46))
    )
    chunks = first[: 3 * _source._CHUNK].reshape(3, -1)
    assert not np.array_equal(chunks[0], chunks[1])  # each chunk has its own stream


def test_zero_source_draws_zeros() -> None:
    draws = discrete_gaussian(100, 50, NoiseSource.zero_for_tests())
    assert draws.dtype == np.int64 and draws.shape == (50,) and not draws.any()


def test_default_source_reads_the_os_csprng(monkeypatch: pytest.MonkeyPatch) -> None:
    requested: list[int] = []
    real_urandom = _source.os.urandom

    def spy(nbytes: int) -> bytes:
        requested.append(nbytes)
        return real_urandom(nbytes)

    monkeypatch.setattr(_source.os, "urandom", spy)
    draws = discrete_gaussian(4, 1000)
    assert requested and draws.shape == (1000,) and np.unique(draws).size > 5


def test_size_zero_and_invalid_arguments() -> None:
    assert discrete_gaussian(1, 0).shape == (0,)
    for size in (-1, 1.5, "3", None, True):
        with pytest.raises(NoiseError, match="size"):
            discrete_gaussian(1, size)  # type: ignore[arg-type]
    with pytest.raises(NoiseError, match="source"):
        discrete_gaussian(1, 3, "urandom")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "sigma2", [0, -1, float("nan"), float("inf"), "1", None, True, 1j, 2.0**49]
)
def test_invalid_sigma2_names_sigma2(sigma2: object) -> None:
    with pytest.raises(NoiseError, match="sigma2"):
        exact_sigma2(sigma2)  # type: ignore[arg-type]
    with pytest.raises(NoiseError, match="sigma2"):
        discrete_gaussian(sigma2, 3)  # type: ignore[arg-type]


def test_tiny_and_huge_sigma2() -> None:
    """σ² = 0.001: P(Z ≠ 0) ≈ 2e^{−500}, so any nonzero draw means a broken sampler. σ = 2**24
    (the largest σ²): mean within 5 standard errors (false-alarm ≈ 6e-7), spread about σ."""
    assert not discrete_gaussian(0.001, 100_000, NoiseSource.seeded_for_tests(47)).any()
    n = 100_000
    draws = discrete_gaussian(2**48, n, NoiseSource.seeded_for_tests(48)).astype(np.float64)
    assert abs(draws.mean()) < 5 * 2**24 / math.sqrt(n)
    assert draws.std() == pytest.approx(2**24, rel=0.02)


# --------------------------------------------------------------------------- exact σ²


def test_exact_sigma2_keeps_exact_values() -> None:
    assert exact_sigma2(1) == 1 and exact_sigma2(900) == 900 and exact_sigma2(9e6) == 9_000_000
    assert exact_sigma2(2.5) == Fraction(5, 2)
    assert exact_sigma2(Fraction(7, 3)) == Fraction(7, 3)
    assert exact_sigma2(np.int64(64)) == 64 and exact_sigma2(np.float64(0.25)) == Fraction(1, 4)


@pytest.mark.parametrize(
    "sigma2",
    [0.1, 0.01, 1 / 3, math.pi, 1e-9, 2.0**30, 2.0**48, Fraction(10**30 + 1, 10**24), 12345.678],
)
def test_exact_sigma2_rounds_up_with_bounded_terms(sigma2: float | Fraction) -> None:
    """σ² = t·c with c rounded up to a denominator ≤ 2**26/t: it grows by at most t/(2**26/t),
    which is at most 2**-24 of σ² for σ ≥ 1 and 2**-26 for σ < 1."""
    exact, asked = exact_sigma2(sigma2), Fraction(sigma2)
    t = math.ceil(math.sqrt(float(exact)))  # ⌈σ⌉ of the exact σ² (no ties here)
    assert (t - 1) ** 2 < exact <= t * t
    bound = max(1, 2**26 // t)
    assert exact >= asked
    assert (exact / t).denominator <= bound and exact <= t * t
    assert exact - asked <= Fraction(t, bound)
    assert exact - asked <= (asked / 2**24 if asked >= 1 else Fraction(1, 2**26))


def test_exact_sigma2_when_rounding_reaches_a_square() -> None:
    """σ² just below 16: σ²/t with t = ⌈σ⌉ = 4 rounds up to 4, i.e. σ² = 16, which keeps t = 4;
    and t is σ itself at a perfect square (σ²/t = σ, E = 1)."""
    assert exact_sigma2(Fraction(16 * 10**30 - 1, 10**30)) == 16
    assert (
        _gaussian._t_of(Fraction(16)) == 4 and _gaussian._t_of(Fraction(16 * 10**6 + 1, 10**6)) == 5
    )
    law = _gaussian._Law.of(Fraction(900))
    assert (law.t, law.p, law.e) == (30, 30, 1)


# --------------------------------------------------------------------------- reporting helpers


@pytest.mark.parametrize(
    "sigma2", [Fraction(3, 10), 1, Fraction(7, 3), Fraction(121, 4), 900, 2.0**20, 2.0**30]
)
def test_helpers_match_direct_sums_of_the_pmf(sigma2: float | Fraction) -> None:
    """σ² = 2**30 (σ = 32768) takes the large-σ formulas; the brute force sums 2.6M terms."""
    exact = exact_sigma2(sigma2)
    z, pmf = exact_pmf(exact, support(exact))
    assert gaussian_variance(sigma2) == pytest.approx(math.fsum(pmf * z.astype(float) ** 2), 1e-9)
    at_most = np.cumsum(pmf[z >= 0] * np.where(z[z >= 0] == 0, 1, 2))  # P(|Z| ≤ h)
    assert gaussian_moe95(sigma2) == int(np.argmax(at_most >= 0.95))


def test_large_sigma_formulas_agree_with_sums_where_both_apply(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The dual-lattice (Poisson summation) forms against direct sums over z at large σ²."""
    sigmas2 = (2.0**20, 4e6 + 1 / 3)
    gaussian_law.cache_clear()
    by_formulas = [(gaussian_variance(s2), gaussian_moe95(s2)) for s2 in sigmas2]
    monkeypatch.setattr(_gaussian_law, "_DIRECT_MAX_SIGMA2", 1e7)
    gaussian_law.cache_clear()
    by_sums = [(gaussian_variance(s2), gaussian_moe95(s2)) for s2 in sigmas2]
    gaussian_law.cache_clear()
    for (var_s, h_s), (var_f, h_f) in zip(by_sums, by_formulas, strict=True):
        assert var_f == pytest.approx(var_s, rel=1e-12) and h_f == h_s


def test_variance_is_below_sigma2_for_small_sigma() -> None:
    # σ² = 1/4: Var = 2Σ z²e^{−2z²} / (1 + 2Σ e^{−2z²}), terms past z = 3 below 1e-30.
    e = [math.exp(-2 * z * z) for z in (1, 2, 3)]
    var = 2 * (e[0] + 4 * e[1] + 9 * e[2]) / (1 + 2 * sum(e))
    assert gaussian_variance(Fraction(1, 4)) == pytest.approx(var, rel=1e-12)
    assert var < 0.25 - 0.03
    assert gaussian_moe95(0.001) == 0


# --------------------------------------------------------------------------- Bernoulli exactness


class _ScriptedStream:
    """Gives the nibbles and words a test lays out, in order (for exhaustive enumeration)."""

    def __init__(self, nibbles: np.ndarray, words: np.ndarray) -> None:
        self._nibbles, self._words = nibbles, words

    def nibbles(self, n: int) -> np.ndarray:
        out, self._nibbles = self._nibbles[:n], self._nibbles[n:]
        return out

    def words(self, n: int, dtype: type[np.unsignedinteger]) -> np.ndarray:
        out, self._words = self._words[:n].astype(dtype), self._words[n:]
        return out


@pytest.mark.parametrize("num,den", [(3, 7), (0, 5), (5, 5), (11, 240), (1000, 3001)])
def test_lazy_comparison_is_exactly_bernoulli_num_over_den(
    num: int, den: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Enumerate every first nibble, and for the tying nibble every usable word of the uniform
    below den: the fraction of True is num/den exactly (not a statistical test)."""
    monkeypatch.setattr(_bernoulli, "_FEW", 0)  # the nibble path, whatever the size
    dtype, q = _source._word_for(den)
    usable = den * q  # words below this give w // q uniform below den
    digit = 16 * num // den
    nibbles = np.repeat(np.arange(16, dtype=np.uint8), usable)
    tie_words = np.arange(usable) if digit < 16 else np.arange(0)
    stream = _ScriptedStream(nibbles, tie_words)
    entries = np.full(nibbles.size, num, np.uint64)
    out = _bernoulli._bern_ratio(stream, entries, den)  # type: ignore[arg-type]
    assert Fraction(int(out.sum()), out.size) == Fraction(num, den)


@pytest.mark.parametrize("num,den", [(3, 7), (0, 5), (5, 5), (1000, 3001)])
def test_comparison_of_few_entries_is_exactly_bernoulli_num_over_den(
    num: int, den: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Few entries take one uniform word each: enumerate every usable word."""
    dtype, q = _source._word_for(den)
    usable = den * q
    monkeypatch.setattr(_bernoulli, "_FEW", usable + 1)  # the word path for this many entries
    stream = _ScriptedStream(np.arange(0, dtype=np.uint8), np.arange(usable))
    out = _bernoulli._bern_ratio(stream, np.full(usable, num, np.uint64), den)  # type: ignore[arg-type]
    assert Fraction(int(out.sum()), out.size) == Fraction(num, den)


@pytest.mark.parametrize(
    "gamma",
    [
        Fraction(2**52 + 1, 2**53 + 3),  # a denominator above today's 2**32 limit
        Fraction(3 * 2**50 + 7, 2**51 - 1),  # γ > 1 with a large denominator
        Fraction(5, 3) + Fraction(1, 2**70),  # a denominator past 64 bits: Python integers
        Fraction(0),
        Fraction(40, 1),
    ],
)
def test_bernoulli_exp_with_large_denominators(gamma: Fraction) -> None:
    """Mean within 5 standard errors of exp(−γ) (false-alarm rate ≈ 6e-7)."""
    n = 20_000 if gamma.denominator > 2**64 else 400_000
    draws = bernoulli_exp(gamma, n, NoiseSource.seeded_for_tests(49))
    p = math.exp(-float(gamma))
    assert abs(draws.mean() - p) <= 5 * math.sqrt(p * (1 - p) / n) + 1e-12


def test_split_bernoulli_matches_exp_of_whole_plus_fraction() -> None:
    """Algorithm 3's acceptance form: exp(−(w + r/D)) per entry with mixed w and a 2**53-sized D.
    Each group's mean within 5 standard errors (false-alarm rate ≈ 2e-6 over four groups)."""
    den = 2**53 - 111
    whole = np.repeat(np.array([0, 0, 1, 3], dtype=np.int64), 100_000)
    rest = np.repeat(np.array([0, den - 1, den // 3, den // 2], dtype=np.uint64), 100_000)
    stream = seeded_stream(50)
    kept = _bernoulli._bern_exp_split(stream, whole, rest, den).reshape(4, -1).mean(axis=1)
    for got, w, r in zip(kept, [0, 0, 1, 3], [0, den - 1, den // 3, den // 2], strict=True):
        p = math.exp(-(w + r / den))
        assert abs(got - p) <= 5 * math.sqrt(p * (1 - p) / 100_000) + 1e-12
