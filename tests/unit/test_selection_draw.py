"""Key selection's draws: exact keep probabilities (χ²) and an empirical privacy audit.

Every statistical test uses a fixed seed and states its false-alarm rate (how often it would fail
a correct mechanism were the seed drawn at random). The audit checks what the guarantee says on
neighbouring datasets: a key that only the added unit holds is released with probability ≤ δ
(its Clopper–Pearson lower bound must not exceed δ), and for a key the neighbours share, the
release probabilities satisfy P(E) ≤ e^ε·P'(E) + (δ for the optimal rule, 0 for a threshold rule)
both ways. A mechanism drawn with twice the δ it claims, or too little noise, is caught.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dprelease.loss import PrivacyLoss
from dprelease.mechanism.noise import NoiseSource
from dprelease.mechanism.selection import (
    Policy,
    Rule,
    SelectionPlan,
    _draw,
    keep_table,
    plan_selection,
)

EPSILON = Fraction(1, 2)
DELTA = Fraction(1, 1000)  # large enough to be seen in 10⁵ draws


def units(counts: list[int], repeats: int, g: int = 1, held: int = 1) -> np.ndarray:
    """A units-per-key table: each count repeated, all units holding `held` of ≤ g keys."""
    table = np.zeros((len(counts) * repeats, g), dtype=np.int64)
    table[:, held - 1] = np.repeat(counts, repeats)
    return table


def chi2_of_keeps(kept: np.ndarray, expected: np.ndarray, repeats: int) -> float:
    """p-value of the keep counts per count against their exact probabilities (cells with an
    expected keep or drop count below 5 are left out)."""
    observed = kept.reshape(-1, repeats).sum(axis=1)
    mean = expected * repeats
    usable = (mean >= 5) & (repeats - mean >= 5)
    variance = np.where(usable, mean * (1 - expected), 1.0)
    statistic = (((observed - mean) ** 2) / variance)[usable].sum()
    return float(stats.chi2.sf(statistic, df=int(usable.sum())))


PLANS = {
    "optimal": lambda: plan_selection(PrivacyLoss.pure(EPSILON), DELTA),
    "laplace": lambda: plan_selection(PrivacyLoss.pure(EPSILON), DELTA, rule=Rule.LAPLACE),
    "laplace_weighted": lambda: plan_selection(
        PrivacyLoss.pure(EPSILON), DELTA, 3, rule=Rule.LAPLACE, policy=Policy.WEIGHTED
    ),
    "gaussian_pure": lambda: plan_selection(
        PrivacyLoss.pure(EPSILON), DELTA, 3, rule=Rule.GAUSSIAN
    ),
    "gaussian": lambda: plan_selection(PrivacyLoss.zcdp(Fraction(1, 8)), DELTA),
    "gaussian_weighted": lambda: plan_selection(PrivacyLoss.zcdp(Fraction(1, 8)), DELTA, 3),
}


@pytest.mark.parametrize("name", PLANS)
def test_keep_frequencies_match_the_exact_probabilities(name: str) -> None:
    """χ² over counts 1..(certain or 2τ), 20 000 keys each; false-alarm rate 1e-4 per plan."""
    plan: SelectionPlan = PLANS[name]()
    g = plan.max_keys_per_unit
    top = 2 * plan.tau(g) + 4
    counts = list(range(1, top))
    repeats = 20_000
    kept = plan.select(units(counts, repeats, g, held=g), NoiseSource.seeded_for_tests(71))
    expected = plan.keep_probability(np.array(counts), keys_per_unit=g)
    assert chi2_of_keeps(kept, expected, repeats) > 1e-4


def test_chi2_has_power_against_a_shifted_rule() -> None:
    """Draws of the optimal rule at δ = 2e-3 fail against the probabilities of δ = 1e-3."""
    plan = PLANS["optimal"]()
    wrong = plan_selection(PrivacyLoss.pure(EPSILON), 2 * DELTA)
    counts = list(range(1, 2 * plan.tau() + 4))
    kept = wrong.select(units(counts, 20_000), NoiseSource.seeded_for_tests(72))
    assert chi2_of_keeps(kept, plan.keep_probability(np.array(counts)), 20_000) < 1e-4


def test_the_slow_path_is_exact_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the first word never deciding, every draw goes through the refinement (more words,
    more digits); the keep frequencies still match p(n). False-alarm rate 1e-4."""

    def undecided(table):  # type: ignore[no-untyped-def]
        size = table.certain + 1
        return np.zeros(size, np.uint64), np.full(size, 2**64 - 1, np.uint64), np.zeros(size, bool)

    monkeypatch.setattr(_draw, "_word_bounds", undecided)
    table = keep_table(EPSILON, DELTA)
    counts = list(range(1, table.certain + 1))
    repeats = 1_000
    held = np.repeat(counts, repeats)
    kept = _draw.optimal_keep(held, EPSILON, DELTA, NoiseSource.seeded_for_tests(73))
    expected = np.array([float(sum(table.bounds(n)) / 2) for n in counts])
    assert chi2_of_keeps(kept, expected, repeats) > 1e-4


def test_zero_noise_keeps_what_a_noiseless_rule_would() -> None:
    """The all-zero test source: a threshold rule keeps counts ≥ τ; the optimal rule keeps
    counts with p(n) > 1/2 (U = 1/2); nobody's key (a zero row) is never kept."""
    zero = NoiseSource.zero_for_tests()
    laplace = PLANS["laplace"]()
    optimal = PLANS["optimal"]()
    counts = np.array([[0], [1], [laplace.tau() - 1], [laplace.tau()], [10_000]])
    assert laplace.select(counts, zero).tolist() == [False, False, False, True, True]
    n = optimal.tau()
    table = np.array([[0], [1], [n - 1], [n], [10_000]])
    assert optimal.select(table, zero).tolist() == [False, False, False, True, True]


def test_one_draw_per_key_whatever_the_counts() -> None:
    """The words drawn depend on how many candidate keys there are, not on their counts: two
    tables of the same size give decisions from the same uniforms (same seed)."""
    plan = PLANS["optimal"]()
    low = plan.select(units([1], 50_000), NoiseSource.seeded_for_tests(5))
    high = plan.select(units([plan.tau()], 50_000), NoiseSource.seeded_for_tests(5))
    assert not (low & ~high).any()  # a kept key with count 1 is kept with count τ: same U


# --------------------------------------------------------------------------- empirical privacy

N = 200_000
ALPHA = 1e-6  # total false-alarm rate of each audit, split by Bonferroni over its bounds


def upper(count: int, n: int, alpha: float) -> float:
    return float(stats.beta.ppf(1 - alpha, count + 1, n - count)) if count < n else 1.0


def lower(count: int, n: int, alpha: float) -> float:
    return float(stats.beta.ppf(alpha, count, n - count + 1)) if count > 0 else 0.0


def lone_key_frequency(plan: SelectionPlan, seed: int) -> int:
    """How often, in N releases, any key that only the protected unit holds is released (the
    unit holds G keys nobody else holds, the weighted worst case of one key each for G = 1)."""
    g = plan.max_keys_per_unit
    table = np.zeros((N * g, g), dtype=np.int64)
    table[:, g - 1] = 1  # every key: one unit, which holds g keys
    kept = plan.select(table, NoiseSource.seeded_for_tests(seed)).reshape(N, g)
    return int(kept.any(axis=1).sum())


@pytest.mark.parametrize("name", PLANS)
def test_a_key_only_the_protected_unit_holds_is_released_at_most_delta(name: str) -> None:
    """The release frequency's lower confidence bound (false-alarm rate 1e-6) is ≤ the δ that
    covers lone keys: the whole δ, except for the pure-scope Gaussian, whose lone keys get only
    δ₂ = G·P(Z ≥ τ − w), its proved bound on any of the unit's G lone keys being released
    (its δ is the maximum over splits of a unit's keys into lone and shared ones)."""
    plan = PLANS[name]()
    lone = DELTA
    if plan.lone_delta is not None:
        lone = plan.lone_delta
        assert lone <= DELTA
    released = lone_key_frequency(plan, seed=81)
    assert lower(released, N, ALPHA) <= float(lone)


def test_audit_catches_a_rule_drawn_with_twice_its_delta() -> None:
    """A plan that claims δ = 1e-3 but draws at 2e-3 is flagged (power check)."""
    plan = PLANS["optimal"]()
    cheat = plan_selection(PrivacyLoss.pure(EPSILON), 2 * DELTA)
    released = lone_key_frequency(cheat, seed=82)
    assert lower(released, N, ALPHA) > float(plan.delta)


def neighbour_violation(plan: SelectionPlan, epsilon: float, delta: float, seed: int) -> float:
    """The largest lower bound, over shared keys held by n vs n + 1 units and both outcomes and
    directions, of P(E) − e^ε·P'(E) − δ (positive: the guarantee is broken, with confidence)."""
    g = plan.max_keys_per_unit
    counts = list(range(1, 2 * plan.tau(g) + 4))
    kept = plan.select(units(counts, N // 10, g, held=g), NoiseSource.seeded_for_tests(seed))
    keeps = kept.reshape(len(counts), -1).sum(axis=1)
    n = N // 10
    bonferroni = ALPHA / (8 * len(counts))
    worst = -1.0
    for a, b in zip(keeps[:-1].tolist(), keeps[1:].tolist(), strict=True):
        for x, y in ((a, b), (b, a), (n - a, n - b), (n - b, n - a)):
            gap = lower(x, n, bonferroni) - math.exp(epsilon) * upper(y, n, bonferroni) - delta
            worst = max(worst, gap)
    return worst


@pytest.mark.parametrize("name", ["optimal", "laplace", "laplace_weighted"])
def test_shared_keys_move_by_at_most_epsilon(name: str) -> None:
    """Pure rules: e^ε with δ for the optimal rule (its per-key (ε/G, δ/G)), none for a
    threshold rule's shared keys (they see ε-DP noisy counts). False-alarm rate 1e-6 each."""
    plan = PLANS[name]()
    g = plan.max_keys_per_unit
    if plan.rule is Rule.OPTIMAL:
        epsilon, delta = (float(x) for x in plan.key_loss or ())
    else:  # a key's weight moves by w_g; the noise is calibrated to a unit's whole weight w_1
        epsilon, delta = float(EPSILON) * plan.weights[g - 1] / plan.weights[0], 0.0
    assert neighbour_violation(plan, epsilon, delta, seed=91) <= 0


def test_audit_catches_too_little_noise() -> None:
    """A threshold rule drawn at half the scale it claims breaks e^ε on shared keys."""
    plan = PLANS["laplace"]()
    assert plan.scale is not None
    broken = SelectionPlan(**{**plan.__dict__, "scale": plan.scale / 2})
    assert neighbour_violation(broken, float(EPSILON), 0.0, seed=92) > 0
