"""The Python randomizers sample their laws exactly.

Every exact factory is tested against its closed form, every protocol's reports against their
exact law, and an empirical privacy audit bounds the loss they show. Seeds are fixed; each
goodness-of-fit test fails a correct sampler with probability P_MIN = 1e-4 (about 0.3% for the
~30 of them here), each audit with probability 1e-6 (local_audit.ALPHA).
"""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

import pytest
from local_audit import (
    chi2_pvalue,
    epsilon_lower_bound,
    event_of,
    fixed_reader,
    krr_law,
    olh_offset_law,
    olh_parts,
    olh_support_law,
    oue_law,
)
from scipy import stats

import dprelease as dp
from dprelease.errors import ConfigError, NoiseError, UnsafeNoiseSourceError
from dprelease.local._adapter import byte_reader
from dprelease.mechanism.noise import NoiseSource
from dprelease.mechanism.randomized._exact import (
    ByteStream,
    bernoulli,
    bernoulli_exp,
    bernoulli_one_over_one_plus_exp,
    keep_or_other,
    uniform,
)
from dprelease.mechanism.randomized._randomizers import (
    PRIME,
    Randomizer,
    choose_mechanism,
    default_buckets,
    make_randomizer,
    olh_hash,
)

P_MIN = 1e-4


def seeded(seed: int) -> ByteStream:
    return ByteStream(byte_reader(NoiseSource.seeded_for_tests(seed), allow_unsafe_noise=True))


def of_bytes(values: list[int]) -> ByteStream:
    return ByteStream(fixed_reader(bytes(values)))


def binomial_pvalue(successes: int, n: int, p: float) -> float:
    return float(stats.binomtest(successes, n, p).pvalue)


# -- the exact draws ------------------------------------------------------------------------------


def test_uniform_reads_the_documented_bytes() -> None:
    """The byte-level definition the JavaScript module repeats (tests/js/randomize.test.mjs)."""
    assert uniform(of_bytes([0xFF, 0x05]), 6) == 5  # 3 low bits: 7 rejected, 5 kept
    assert uniform(of_bytes([0xE8, 0x03, 0x01, 0x00]), 1000) == 1  # 10 bits, little-endian
    stream = of_bytes([9])
    assert uniform(stream, 1) == 0  # reads nothing
    assert uniform(stream, 256) == 9


@pytest.mark.parametrize("m", [2, 3, 7, 200, 257, 1000, PRIME])
def test_uniform_is_uniform(m: int) -> None:
    n, bins = 60_000, min(m, 20)
    stream = seeded(m % 1000)
    edges = [m * i // bins for i in range(bins + 1)]  # bin i holds [edges[i], edges[i+1])
    counts = Counter()
    for _ in range(n):
        x = uniform(stream, m)
        counts[next(i for i in range(bins) if x < edges[i + 1])] += 1
    probabilities = [(edges[i + 1] - edges[i]) / m for i in range(bins)]
    assert chi2_pvalue([counts[i] for i in range(bins)], probabilities) > P_MIN


@pytest.mark.parametrize(("num", "den"), [(0, 5), (1, 3), (7, 10), (5, 5)])
def test_bernoulli_of_a_fraction(num: int, den: int) -> None:
    stream, n = seeded(num * 10 + den), 50_000
    successes = sum(bernoulli(stream, num, den) for _ in range(n))
    assert binomial_pvalue(successes, n, num / den) > P_MIN


@pytest.mark.parametrize("gamma", [Fraction(1, 1000), Fraction(1, 3), 1, Fraction(5, 2), 7])
def test_bernoulli_exp_has_probability_exp_minus_gamma(gamma: Fraction) -> None:
    """Algorithm 1 (γ ≤ 1) and its split ⌊γ⌋ + rest (γ > 1): P(true) = e^(−γ)."""
    stream, n = seeded(int(gamma * 1000)), 100_000
    successes = sum(bernoulli_exp(stream, Fraction(gamma)) for _ in range(n))
    assert binomial_pvalue(successes, n, math.exp(-gamma)) > P_MIN


def test_bernoulli_exp_of_zero_is_certain_and_reads_nothing() -> None:
    stream = of_bytes([])
    assert all(bernoulli_exp(stream, Fraction(0)) for _ in range(100))


@pytest.mark.parametrize("gamma", [Fraction(1, 10), 1, 3])
def test_one_over_one_plus_exp(gamma: Fraction) -> None:
    """The two-coin factory: P(true) = e^(−γ)/(e^(−γ) + 1) = 1/(1 + e^γ)."""
    stream, n = seeded(int(gamma * 10) + 1), 100_000
    successes = sum(bernoulli_one_over_one_plus_exp(stream, Fraction(gamma)) for _ in range(n))
    assert binomial_pvalue(successes, n, 1 / (1 + math.exp(gamma))) > P_MIN


@pytest.mark.parametrize(("k", "gamma"), [(2, Fraction(1, 2)), (3, 2), (10, 1)])
def test_keep_or_other_is_k_ary_randomized_response(k: int, gamma: Fraction) -> None:
    """P(v) = e^γ/(e^γ + k − 1), each other index 1/(e^γ + k − 1)."""
    stream, n, value = seeded(k), 60_000, 1
    counts = Counter(keep_or_other(stream, value, k, Fraction(gamma)) for _ in range(n))
    law = krr_law(Randomizer("krr", Fraction(gamma), tuple(range(k))), value)
    assert chi2_pvalue([counts[j] for j in range(k)], law) > P_MIN


# -- the protocols --------------------------------------------------------------------------------


def test_krr_reports_follow_the_exact_law() -> None:
    randomizer = make_randomizer(["never", "once", "monthly", "weekly"], Fraction(1), "krr")
    reports = randomizer.randomize_all(["monthly"] * 60_000, seeded(1))
    counts = Counter(reports)
    law = krr_law(randomizer, 2)
    assert chi2_pvalue([counts[a] for a in randomizer.domain], law) > P_MIN


def test_oue_reports_follow_the_exact_law() -> None:
    """Every bit string of k = 3 bits: independent bits, 1/2 for the answer, 1/(1 + e^ε)."""
    randomizer = make_randomizer([10, 20, 30], Fraction(1, 2), "oue")
    counts = Counter(randomizer.randomize_all([20] * 40_000, seeded(2)))
    law = oue_law(randomizer, 1)
    assert chi2_pvalue([counts[b] for b in law], law.values()) > P_MIN


def test_olh_reports_follow_the_exact_law() -> None:
    """OLH: its seeds uniform, its bucket g-ary randomized response around the hash, and whether
    it supports the answer and another one as the hash family's exact collision rate says."""
    randomizer = make_randomizer(list(range(5)), Fraction(2), "olh")
    assert randomizer.g == 8  # round(e^2) + 1
    reports = [olh_parts(r) for r in randomizer.randomize_all([3] * 40_000, seeded(3))]
    g = randomizer.g
    offsets = Counter((y - olh_hash(a, b, 3, g)) % g for a, b, y in reports)
    assert chi2_pvalue([offsets[d] for d in range(g)], olh_offset_law(randomizer)) > P_MIN
    pairs = Counter(
        f"{int(olh_hash(a, b, 3, g) == y)}{int(olh_hash(a, b, 0, g) == y)}" for a, b, y in reports
    )
    law = olh_support_law(randomizer)
    assert chi2_pvalue([pairs[e] for e in law], law.values()) > P_MIN
    # a − 1 and b by their top 4 of 31 bits: 16 bins, the last one short
    seeds = (([a for a, _, _ in reports], 1, PRIME - 1), ([b for _, b, _ in reports], 0, PRIME))
    for values, low, size in seeds:
        bins = Counter((v - low) >> 27 for v in values)
        widths = [min(size, (i + 1) << 27) - (i << 27) for i in range(16)]
        assert chi2_pvalue([bins[i] for i in range(16)], [w / size for w in widths]) > P_MIN


@pytest.mark.parametrize(
    ("mechanism", "domain"),
    [("krr", ["yes", "no", "refuse"]), ("oue", [0, 1, 2]), ("olh", [True, False])],
)
def test_audit_finds_no_excess_privacy_loss(mechanism: str, domain: list) -> None:
    """Reports of two answers, 100,000 each: no event is more than e^ε times as likely under
    one (false alarm ≤ 1e-6); the audit is sharp, finding most of ε (k-RR, OUE and OLH each
    have events with ratio exactly e^ε)."""
    randomizer = make_randomizer(domain, Fraction(1), mechanism)  # type: ignore[arg-type]
    event = event_of(randomizer, 0, 1)
    n = 100_000
    counts_v = Counter(map(event, randomizer.randomize_all([domain[0]] * n, seeded(10))))
    counts_w = Counter(map(event, randomizer.randomize_all([domain[1]] * n, seeded(11))))
    bound = epsilon_lower_bound(counts_v, counts_w, n)
    assert 0.85 < bound <= 1


def test_audit_catches_a_randomizer_that_spends_more_than_it_says() -> None:
    """k-RR run at ε = 1.3 while ε = 1 is claimed: the audit must see it (it has the power)."""
    claimed, actual = Fraction(1), Fraction(13, 10)
    randomizer = make_randomizer(["a", "b"], actual, "krr")
    event = event_of(randomizer, 0, 1)
    n = 100_000
    counts_v = Counter(map(event, randomizer.randomize_all(["a"] * n, seeded(12))))
    counts_w = Counter(map(event, randomizer.randomize_all(["b"] * n, seeded(13))))
    assert epsilon_lower_bound(counts_v, counts_w, n) > claimed


def test_the_local_face_loads_light() -> None:
    """`dp.local` serves notebooks and command lines: no SQLAlchemy, scipy, Dagster or Spark
    until a ledger or a release needs them."""
    import json
    import subprocess
    import sys

    probe = (
        "import json, sys, dprelease as dp\n"
        "dp.local.randomize(['a'], domain=['a', 'b'], epsilon=1)\n"
        "print(json.dumps(sorted({m.partition('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout.splitlines()[-1]))
    assert not loaded & {"scipy", "sqlalchemy", "matplotlib", "pyspark", "dagster"}


# -- choosing and configuring a randomizer --------------------------------------------------------


def test_the_variance_rule_chooses_krr_below_3e_to_the_epsilon_plus_2() -> None:
    """At ε = 1, 3e + 2 ≈ 10.15: k-RR up to 10 answers, OUE (or OLH when compact) from 11."""
    assert choose_mechanism(10, Fraction(1)) == "krr"
    assert choose_mechanism(11, Fraction(1)) == "oue"
    assert choose_mechanism(11, Fraction(1), compact=True) == "olh"
    assert choose_mechanism(2, Fraction(1, 100)) == "krr"
    assert choose_mechanism(5, Fraction(1, 100)) == "krr"  # 3e^0.01 + 2 ≈ 5.03 > 5
    assert choose_mechanism(6, Fraction(1, 100)) == "oue"


def test_the_rule_is_where_the_variances_cross() -> None:
    """k-RR's n(e^ε + k − 2)/(e^ε − 1)² against OUE's n·4e^ε/(e^ε − 1)²: equal at k = 3e^ε + 2."""
    for eps in (0.5, 1.0, 2.0):
        e = math.exp(eps)
        crossing = 3 * e + 2
        below, above = math.floor(crossing), math.ceil(crossing)
        assert (e + below - 2) < 4 * e < (e + above - 2)
        assert choose_mechanism(below, Fraction(eps)) == "krr"
        assert choose_mechanism(above, Fraction(eps)) == "oue"


def test_olh_buckets() -> None:
    assert [default_buckets(Fraction(e)) for e in ("0.1", "1", "2", "5/2")] == [2, 4, 8, 13]


def test_answers_keep_their_kind() -> None:
    """True is not the answer 1, nor "1" the answer 1 (as in the JavaScript module)."""
    randomizer = make_randomizer([1, 2], Fraction(1), "krr")
    for wrong in (True, "1", 3):
        with pytest.raises(ConfigError, match="not in the domain"):
            randomizer.index(wrong)
    assert randomizer.index(2) == 1


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        (("rappor", Fraction(1), ("a", "b"), None), "mechanism"),
        (("krr", Fraction(1), ("a",), None), "domain"),
        (("krr", Fraction(1), ("a", "a"), None), "domain"),
        (("krr", Fraction(1), ("a", "b"), 3), "g"),
        (("olh", Fraction(1), ("a", "b"), None), "g"),
        (("olh", Fraction(1), ("a", "b"), 1), "g"),
    ],
)
def test_a_bad_randomizer_is_refused(arguments: tuple, field: str) -> None:
    with pytest.raises(ConfigError) as refused:
        Randomizer(*arguments)
    assert refused.value.path == field


def test_randomize_refuses_seeded_and_zero_sources_on_its_own() -> None:
    """Production never randomizes with a fixed seed; the zero source has no bytes."""
    with pytest.raises(UnsafeNoiseSourceError):
        dp.local.randomize(
            ["a"], domain=["a", "b"], epsilon=1, source=NoiseSource.seeded_for_tests(1)
        )
    with pytest.raises(NoiseError, match="zero"):
        dp.local.randomize(
            ["a"], domain=["a", "b"], epsilon=1, source=NoiseSource.zero_for_tests(),
            allow_unsafe_noise=True,
        )  # fmt: skip


def test_a_randomizer_takes_one_answer() -> None:
    """`Randomizer.randomize`: one answer, one report, from the CSPRNG (or a test seed)."""
    randomizer = dp.local.randomizer(["yes", "no"], "1/2")
    assert randomizer.randomize("yes") in {"yes", "no"}
    reports = [
        [randomizer.randomize("no", source=source, allow_unsafe_noise=True) for _ in range(20)]
        for source in (NoiseSource.seeded_for_tests(8), NoiseSource.seeded_for_tests(8))
    ]
    assert reports[0] == reports[1] and set(reports[0]) == {"yes", "no"}
    with pytest.raises(UnsafeNoiseSourceError):
        randomizer.randomize("no", source=NoiseSource.seeded_for_tests(8))


def test_randomize_keeps_missing_answers_missing_and_is_reproducible_from_a_seed() -> None:
    def draw() -> list:
        return dp.local.randomize(
            ["a", None, "b", "c"], domain=["a", "b", "c"], epsilon="1/2",
            source=NoiseSource.seeded_for_tests(5), allow_unsafe_noise=True,
        )  # fmt: skip

    first = draw()
    assert first[1] is None and all(r in {"a", "b", "c"} for r in first if r is not None)
    assert draw() == first
    assert dp.local.randomize([], domain=[0, 1], epsilon=1) == []
    with pytest.raises(ConfigError, match="epsilon"):
        dp.local.randomize(["a"], domain=["a", "b"], epsilon=0)
