"""The estimators of counts from randomized reports: unbiased, with the variance the formula
states and 95% margins that cover, on a real survey column over 1,000 simulated waves.

The columns are NHANES II's (docs/data/nhanes2.csv, 10,337 respondents): `race` (3 answers,
k-RR), `stratid` (31 design strata, OUE, which the variance rule picks at ε = 1) and `region`
(4 answers, OLH: drawn per respondent, so a short column keeps the test fast). A wave
is simulated from each protocol's exact joint law (numpy, seeded; the randomizers' own law is
tested in test_local_randomizers): k-RR's reports of each true answer are multinomial, OUE's
bits independent binomials, OLH is drawn per respondent (seeds, hash, bucket). Each test has a
false-alarm rate of about 1e-4 (Bonferroni over the answers where it tests several).
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import cache

import numpy as np
import polars as pl
import pytest
from helpers import ROOT
from local_audit import krr_law, olh_support_law
from scipy import stats

from dprelease.mechanism.randomized._estimators import (
    Z95,
    collision,
    debias,
    law_of,
    plug_in_variance,
    project,
    variance,
    worst_variance,
)
from dprelease.mechanism.randomized._randomizers import PRIME, Randomizer, make_randomizer, olh_hash

WAVES = 1_000
P_MIN = 1e-4


@cache
def nhanes_column(name: str) -> tuple[list[int], np.ndarray]:
    """The answers of one NHANES II column: its domain (sorted) and each respondent's index."""
    column = pl.read_csv(ROOT / "docs" / "data" / "nhanes2.csv")[name]
    domain = sorted(column.unique().to_list())
    index = {value: i for i, value in enumerate(domain)}
    return domain, np.array([index[v] for v in column.to_list()])


def simulate_support(
    randomizer: Randomizer, answers: np.ndarray, waves: int, seed: int
) -> np.ndarray:
    """Support counts (waves × k) of `waves` waves of `answers`, from the protocol's exact law."""
    rng = np.random.default_rng(seed)
    k, n = randomizer.k, answers.size
    truth = np.bincount(answers, minlength=k)
    out = np.zeros((waves, k), dtype=np.int64)
    if randomizer.mechanism == "krr":
        for u in range(k):
            out += rng.multinomial(truth[u], krr_law(randomizer, u), size=waves)
        return out
    if randomizer.mechanism == "oue":
        q = 1 / (1 + math.exp(randomizer.epsilon))
        return rng.binomial(truth, 0.5, size=(waves, k)) + rng.binomial(n - truth, q, (waves, k))
    g = randomizer.g
    assert g is not None
    e = math.exp(randomizer.epsilon)
    keep = e / (e + g - 1)
    v = np.arange(k)
    for w in range(waves):
        a = rng.integers(1, PRIME, n)
        b = rng.integers(0, PRIME, n)
        bucket = ((a * answers + b) % PRIME) % g
        shift = np.where(rng.random(n) < keep, 0, rng.integers(1, g, n))
        y = (bucket + shift) % g
        out[w] = (((a[:, None] * v + b[:, None]) % PRIME) % g == y[:, None]).sum(axis=0)
    return out


CASES = [("race", "krr", Fraction(1)), ("stratid", "oue", Fraction(1)), ("region", "olh", 1)]


@cache
def waves_of(column: str, mechanism: str, epsilon: Fraction):  # type: ignore[no-untyped-def]
    domain, answers = nhanes_column(column)
    randomizer = make_randomizer(domain, Fraction(epsilon), mechanism)  # type: ignore[arg-type]
    support = simulate_support(randomizer, answers, WAVES, seed=len(domain) + len(mechanism))
    n = np.full(WAVES, answers.size)
    truth = np.bincount(answers, minlength=randomizer.k).astype(float)
    return randomizer, support, n, truth


def test_the_rule_picks_these_protocols() -> None:
    assert make_randomizer([1, 2, 3], Fraction(1)).mechanism == "krr"
    assert make_randomizer(list(range(31)), Fraction(1)).mechanism == "oue"
    assert make_randomizer(list(range(31)), Fraction(1), compact=True).mechanism == "olh"


@pytest.mark.parametrize(("column", "mechanism", "epsilon"), CASES)
def test_the_estimate_is_unbiased(column: str, mechanism: str, epsilon: Fraction) -> None:
    """Mean of 1,000 waves' estimates against the true counts: a z-test per answer, with the
    exact variance; Bonferroni over the k answers."""
    randomizer, support, n, truth = waves_of(column, mechanism, epsilon)
    estimates = debias(support.astype(float), n, law_of(randomizer))
    sd = np.sqrt(variance(np.tile(truth, (1, 1)), n[:1], law_of(randomizer))[0] / WAVES)
    z = (estimates.mean(axis=0) - truth) / sd
    assert 2 * stats.norm.sf(np.abs(z)).min() * randomizer.k > P_MIN, z


@pytest.mark.parametrize(("column", "mechanism", "epsilon"), CASES)
def test_the_variance_is_the_formula(column: str, mechanism: str, epsilon: Fraction) -> None:
    """The estimates' sample variance over 1,000 waves against (n_v·p(1−p) + (n−n_v)·q(1−q))/
    (p−q)²: (W − 1)s²/σ² is χ² with W − 1 degrees of freedom (the estimate is a sum of n
    independent terms, normal to within far less than this test sees); Bonferroni over k."""
    randomizer, support, n, truth = waves_of(column, mechanism, epsilon)
    law = law_of(randomizer)
    estimates = debias(support.astype(float), n, law)
    formula = variance(truth[None, :], n[:1], law)[0]
    statistic = (WAVES - 1) * estimates.var(axis=0, ddof=1) / formula
    chi2 = stats.chi2(WAVES - 1)
    p_values = 2 * np.minimum(chi2.cdf(statistic), chi2.sf(statistic))
    assert p_values.min() * randomizer.k > P_MIN, statistic / (WAVES - 1)


@pytest.mark.parametrize(("column", "mechanism", "epsilon"), CASES)
def test_the_margins_cover_95_percent(column: str, mechanism: str, epsilon: Fraction) -> None:
    """1.96·√(variance at the estimate, clipped) covers the true count in 95% of waves, per
    answer (binomial test over 1,000 waves, Bonferroni over k); the projection's margin (plus
    |τ|) covers whenever the estimate's does, in every wave."""
    randomizer, support, n, truth = waves_of(column, mechanism, epsilon)
    law = law_of(randomizer)
    estimates = debias(support.astype(float), n, law)
    margin = Z95 * np.sqrt(plug_in_variance(estimates, n, law))
    covered = np.abs(estimates - truth) <= margin
    p_values = [stats.binomtest(int(c), WAVES, 0.95).pvalue for c in covered.sum(axis=0)]
    assert min(p_values) * randomizer.k > P_MIN, covered.mean(axis=0)
    projected, tau = project(estimates, n)
    covered_projected = np.abs(projected - truth) <= margin + np.abs(tau)[:, None]
    assert (covered_projected | ~covered).all()
    assert covered_projected.mean() >= covered.mean()


def test_krr_estimates_sum_to_the_respondents() -> None:
    """Σ_v (C_v − nq)/(p − q) = (n − knq)/(p − q) = n, since p + (k − 1)q = 1."""
    randomizer, support, n, _ = waves_of("race", "krr", Fraction(1))
    estimates = debias(support.astype(float), n, law_of(randomizer))
    assert np.allclose(estimates.sum(axis=1), n)


@pytest.mark.parametrize("mechanism", ["krr", "oue", "olh"])
def test_p_and_q_are_the_support_probabilities_of_the_exact_law(mechanism: str) -> None:
    """p and q as the estimator uses them, against the law the tests sample from."""
    randomizer = make_randomizer(list(range(6)), Fraction(3, 2), mechanism)  # type: ignore[arg-type]
    law = law_of(randomizer)
    if mechanism == "krr":
        exact = krr_law(randomizer, 2)
        assert (law.p, law.q) == pytest.approx((exact[2], exact[0]), rel=1e-12)
    elif mechanism == "oue":
        assert (law.p, law.q) == pytest.approx((0.5, 1 / (1 + math.exp(1.5))), rel=1e-12)
    else:
        pairs = olh_support_law(randomizer)
        assert law.p == pytest.approx(pairs["11"] + pairs["10"], rel=1e-12)
        assert law.q == pytest.approx(pairs["11"] + pairs["01"], rel=1e-12)


def test_the_hash_family_collides_at_the_same_rate_for_every_pair() -> None:
    """For a small prime (101) every (a, b) is enumerated: for each pair x ≠ x', the values
    (a·x + b, a·x' + b) mod P cover every pair of distinct residues once, so P(h(x) = h(x'))
    is one number, which `collision` states exactly."""
    modulus, g = 101, 4
    for x, x2 in ((0, 1), (3, 50), (7, 100)):
        pairs = {
            ((a * x + b) % modulus, (a * x2 + b) % modulus)
            for a in range(1, modulus)
            for b in range(modulus)
        }
        assert len(pairs) == modulus * (modulus - 1)
        assert all(r != s for r, s in pairs)
        same = sum(r % g == s % g for r, s in pairs)
        assert Fraction(same, len(pairs)) == collision(g, modulus)
    assert abs(float(collision(4)) - 1 / 4) < 1e-9  # P = 2^31 − 1: within 1e-9 of 1/g


def test_the_hash_is_the_documented_one() -> None:
    assert olh_hash(1, 0, 5, 4) == 1
    assert (
        olh_hash(PRIME - 1, PRIME - 1, 65535, 13) == ((PRIME - 1) * 65535 + PRIME - 1) % PRIME % 13
    )


def _projection_by_bisection(x: np.ndarray, total: float) -> np.ndarray:
    low, high = x.min() - total - 1, x.max() + 1
    for _ in range(200):
        tau = (low + high) / 2
        if np.maximum(x - tau, 0).sum() > total:
            low = tau
        else:
            high = tau
    return np.maximum(x - (low + high) / 2, 0)


def test_the_projection_is_the_nearest_nonnegative_table_with_the_respondents_total() -> None:
    rng = np.random.default_rng(7)
    estimates = rng.normal(50, 80, size=(200, 6))
    respondents = rng.integers(0, 400, size=200)
    projected, tau = project(estimates, respondents)
    assert (projected >= 0).all()
    assert np.allclose(projected.sum(axis=1), respondents)
    for row in range(200):
        if respondents[row]:
            reference = _projection_by_bisection(estimates[row], respondents[row])
            assert np.allclose(projected[row], reference, atol=1e-7)
            kept = projected[row] > 0
            assert np.allclose(estimates[row][kept] - projected[row][kept], tau[row])
        else:
            assert (projected[row] == 0).all() and tau[row] == 0


def test_the_worst_variance_bounds_every_count() -> None:
    randomizer = make_randomizer(list(range(5)), Fraction(1, 2), "krr")
    law = law_of(randomizer)
    n = np.array([1000])
    counts = np.linspace(0, 1000, 11)[None, :]
    assert (variance(counts, n, law) <= worst_variance(1000, law) + 1e-9).all()
    assert variance(counts, n, law).max() == pytest.approx(worst_variance(1000, law))
