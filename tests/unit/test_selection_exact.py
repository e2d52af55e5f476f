"""Key selection's numbers without randomness: the proved bounds contain the true reals, the
optimal rule is the paper's recursion, each threshold is the smallest whose δ is proved, and the
design's planning figures come out (ε = 0.347, δ = 1e-6: τ = 40, keep(50) ≈ 0.987; G = 5: ≈ 215).
"""

from __future__ import annotations

import math
from decimal import Context, Decimal
from fractions import Fraction

import numpy as np
import pytest
from scipy.special import erfcx

from dprelease.change import ProtectedChange
from dprelease.loss import PrivacyLoss
from dprelease.mechanism.selection import (
    Policy,
    Rule,
    keep_table,
    l1_weights,
    l2_weights,
    plan_report,
    plan_selection,
    selection_entry,
)
from dprelease.mechanism.selection._optimal import per_key_delta
from dprelease.mechanism.selection._real import exp_bounds, pi_bounds, sqrt_bounds
from dprelease.mechanism.selection._tails import (
    gaussian_tail,
    gaussian_tail_upper,
    laplace_tail,
    laplace_tail_upper,
)

PURE = PrivacyLoss.pure(Fraction("0.347"))
DELTA = Fraction(1, 10**6)
FINE = Context(prec=120)  # a reference far finer than the 50 digits the bounds work at


def fine_exp(x: Fraction) -> Decimal:
    return FINE.exp(FINE.divide(Decimal(x.numerator), Decimal(x.denominator)))


# --------------------------------------------------------------------------- real arithmetic


@pytest.mark.parametrize("x", [Fraction(0), Fraction(1, 3), Fraction(-347, 1000), Fraction(-50)])
def test_exp_bounds_contain_the_true_value_tightly(x: Fraction) -> None:
    lo, hi = exp_bounds(x)
    true = fine_exp(x)
    assert lo <= true <= hi
    assert (hi - lo) / true < Decimal("1e-45")


def test_sqrt_and_pi_bounds() -> None:
    lo, hi = sqrt_bounds(Decimal(2))
    assert lo * lo <= 2 <= hi * hi
    pi_lo, pi_hi = pi_bounds()
    assert pi_lo < Decimal(str(math.pi)) + Decimal("1e-15") and pi_hi > Decimal("3.1415926535")


def test_sampford_bound_on_the_mills_ratio() -> None:
    """R(t) = Φc(t)/φ(t) < 4/(3t + √(t² + 8)) for t ≥ 0, the bound the Gaussian δ rests on."""
    t = np.linspace(0, 60, 60_001)
    mills = np.sqrt(np.pi / 2) * erfcx(t / np.sqrt(2))
    assert np.all(4 / (3 * t + np.sqrt(t * t + 8)) > mills)


# --------------------------------------------------------------------------- tails


@pytest.mark.parametrize("scale", [Fraction(1), Fraction(1000, 347), Fraction(2000, 3)])
@pytest.mark.parametrize("j", [1, 7, 40, 500])
def test_laplace_tail_bound_is_the_closed_form_rounded_up(scale: Fraction, j: int) -> None:
    """P(Z ≥ j) = q^j/(1 + q): the proved bound is above it by less than 1e-40 relative, and
    equals the sum of the pmf (the float formula the planner uses agrees)."""
    q = fine_exp(-1 / scale)
    true = FINE.divide(fine_exp(-Fraction(j) / scale), FINE.add(1, q))
    bound = laplace_tail_upper(scale, j)
    assert Fraction(true) <= bound <= Fraction(true) * (1 + Fraction(1, 10**40))
    z = np.arange(j, j + 200 * int(scale) + 200, dtype=np.float64)
    pmf = math.fsum(np.exp(-z / float(scale))) * -math.expm1(-1 / float(scale)) / (1 + float(q))
    assert laplace_tail(scale, j)[0] == pytest.approx(pmf, rel=1e-9)


def fine_gaussian_tail(sigma2: Fraction, j: int) -> Decimal:
    """Σ_{z≥j} e^{−z²/(2σ²)} / Σ_z e^{−z²/(2σ²)} by direct summation at 120 digits."""
    reach = int(60 * math.sqrt(sigma2)) + 60
    terms = [fine_exp(-Fraction(z * z) / (2 * sigma2)) for z in range(0, reach)]
    theta = FINE.subtract(FINE.multiply(2, sum_fine(terms)), terms[0])
    return FINE.divide(sum_fine(terms[j:]), theta)


def sum_fine(terms: list[Decimal]) -> Decimal:
    total = Decimal(0)
    for term in terms:
        total = FINE.add(total, term)
    return total


@pytest.mark.parametrize(
    ("sigma2", "j"),
    [
        (Fraction(1, 4), 1),
        (Fraction(3, 2), 4),
        (Fraction(8), 13),
        (Fraction(100), 50),
        (Fraction(2500), 240),
        (Fraction(2500), 20),
    ],  # fmt: skip
)
def test_gaussian_tail_bound_contains_and_is_tight(sigma2: Fraction, j: int) -> None:
    """Never below the true tail (that is what δ rests on), within 1e-3 of it where σ² is not
    tiny (Θ ≥ √(2π)σ is loose only below σ² ≈ 1/2), and the planner's float is within 1e-9."""
    true = fine_gaussian_tail(sigma2, j)
    bound = gaussian_tail_upper(sigma2, j)
    assert Fraction(true) <= bound
    if sigma2 >= 1:
        assert bound <= Fraction(true) * Fraction(1001, 1000)
    assert gaussian_tail(sigma2, j)[0] == pytest.approx(float(true), rel=1e-9)


# --------------------------------------------------------------------------- the optimal rule


def float_optimal(epsilon: float, delta: float, n: int) -> list[float]:
    """The paper's recursion in floating point (as Google's and PipelineDP's code compute it)."""
    p = [0.0]
    for _ in range(n):
        last = p[-1]
        grow = math.exp(epsilon) * last + delta
        fall = 1 - math.exp(-epsilon) * (1 - last - delta)
        p.append(min(1.0, grow, fall))
    return p


@pytest.mark.parametrize(("epsilon", "delta"), [("0.347", "1e-6"), ("1", "1e-9"), ("0.01", "1e-5")])
def test_optimal_rule_is_the_papers_recursion(epsilon: str, delta: str) -> None:
    eps, dlt = Fraction(epsilon), Fraction(delta)
    table = keep_table(eps, dlt)
    floats = float_optimal(float(eps), float(dlt), table.certain + 5)
    for n in range(table.certain + 5):
        lo, hi = table.bounds(n)
        assert hi - lo < Fraction(1, 10**30)
        assert float(lo) == pytest.approx(floats[n], rel=1e-9, abs=1e-15)
    assert table.bounds(1) == (dlt, dlt)  # p(1) = δ exactly: δ is spent, not approximated
    assert table.bounds(table.certain) == (1, 1) and table.bounds(table.certain - 1)[1] < 1


def test_optimal_rule_meets_every_epsilon_delta_constraint() -> None:
    """For every n: keep and drop are each at most e^ε times likelier, plus δ, with one unit
    more or less (checked on the interval ends, pessimistically)."""
    eps, dlt = Fraction("0.347"), Fraction(1, 10**6)
    table = keep_table(eps, dlt)
    e_lo, e_hi = (Fraction(b) for b in exp_bounds(eps))
    slack = Fraction(1, 10**40)  # the intervals' width
    for n in range(1, table.certain + 2):
        p_lo, p_hi = table.bounds(n)
        q_lo, q_hi = table.bounds(n - 1)
        assert p_hi <= e_hi * q_hi + dlt + slack  # keep, one unit more
        assert (1 - q_lo) <= e_hi * (1 - p_lo) + dlt + slack  # drop, one unit less
        assert q_lo <= p_hi  # monotone: the other two constraints hold trivially
    assert table.median_count() == 36 and table.certain == 71


# --------------------------------------------------------------------------- plans and τ


def test_design_figures_for_laplace_thresholding() -> None:
    """DESIGN §10: ε = 0.347, δ = 1e-6, one key per unit: τ ≈ 40, keep(50) ≈ 0.987, keep(20)
    ≈ 0.001 (0.00057); five keys per unit: τ ≈ 215 (214)."""
    plan = plan_selection(PURE, DELTA, rule=Rule.LAPLACE)
    assert plan.threshold == 40 and plan.tau() == 40
    keep = dict(plan.keep_table())
    assert keep[50] == pytest.approx(0.9871, abs=1e-4)
    assert keep[20] == pytest.approx(0.000567, rel=1e-2)
    five = plan_selection(PURE, DELTA, 5, rule=Rule.LAPLACE, policy=Policy.PER_KEY)
    assert five.threshold == 214


@pytest.mark.parametrize(
    ("loss", "g", "rule", "policy"),
    [
        (PURE, 1, Rule.LAPLACE, Policy.PER_KEY),
        (PURE, 5, Rule.LAPLACE, Policy.PER_KEY),
        (PURE, 5, Rule.LAPLACE, Policy.WEIGHTED),
        (PrivacyLoss.zcdp(Fraction(3, 50)), 1, Rule.GAUSSIAN, Policy.PER_KEY),
        (PrivacyLoss.zcdp(Fraction(3, 50)), 5, Rule.GAUSSIAN, Policy.PER_KEY),
        (PrivacyLoss.zcdp(Fraction(3, 50)), 5, Rule.GAUSSIAN, Policy.WEIGHTED),
        (PrivacyLoss.zcdp(Fraction(1, 100)), 3, Rule.GAUSSIAN, Policy.WEIGHTED),
    ],
)
def test_threshold_is_the_smallest_with_delta_met(
    loss: PrivacyLoss, g: int, rule: Rule, policy: Policy
) -> None:
    """At τ the new-key δ (max over g of g·P(Z ≥ τ − w_g)) is ≤ δ, from the exact tail; at τ − 1
    it is above δ (so τ is not larger than it needs to be, beyond 1e-3 of slack in the bound)."""
    plan = plan_selection(loss, DELTA, g, rule=rule, policy=policy)
    tail = laplace_tail if rule is Rule.LAPLACE else gaussian_tail
    cases = [(g, 1)] if policy is Policy.PER_KEY else list(enumerate(plan.weights, start=1))
    assert plan.threshold is not None and plan.scale is not None and plan.delta_bound is not None

    def spent(threshold: int) -> float:
        return max(count * float(tail(plan.scale, threshold - w)[0]) for count, w in cases)

    assert spent(plan.threshold) <= float(plan.delta_bound) * (1 + 1e-12)
    assert plan.delta_bound <= DELTA
    assert spent(plan.threshold - 1) > float(DELTA) / 1.001


def test_weights_have_the_norm_they_claim() -> None:
    for g in range(1, 40):
        w1, w2 = l1_weights(g), l2_weights(g)
        assert all(k * w1[k - 1] <= w1[0] for k in range(1, g + 1))
        assert all(k * w2[k - 1] ** 2 <= w2[0] ** 2 for k in range(1, g + 1))
    assert l1_weights(5) == (60, 30, 20, 15, 12)


def test_substitution_moves_twice_the_keys() -> None:
    add_remove = plan_selection(PURE, DELTA, 2, rule=Rule.OPTIMAL)
    substitute = plan_selection(PURE, DELTA, 2, ProtectedChange.SUBSTITUTE, rule=Rule.OPTIMAL)
    assert add_remove.key_loss == (PURE.amount / 2, per_key_delta(DELTA, 2))
    assert substitute.key_loss == (PURE.amount / 4, per_key_delta(DELTA, 4))


@pytest.mark.parametrize("keys", [1, 2, 5, 40, 400])
def test_per_key_delta_composes_to_delta(keys: int) -> None:
    """1 − (1 − δ_k)^m ≤ δ exactly, and δ_k is within 1e-40 of the real root (so nothing is
    given away against δ/m, which it exceeds)."""
    key_delta = per_key_delta(DELTA, keys)
    assert 1 - (1 - key_delta) ** keys <= DELTA
    assert key_delta >= DELTA / keys
    root = FINE.power(FINE.subtract(1, Decimal(1) / 10**6), Decimal(1) / keys)
    assert abs(Fraction(FINE.subtract(1, root)) - key_delta) < DELTA * Fraction(1, 10**40)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        (dict(loss=PURE, delta=Fraction(1, 2)), "(0, 1/2)"),
        (dict(loss=PURE, delta=DELTA, rule=Rule.GAUSSIAN, policy=Policy.WEIGHTED), "per_key"),
        (dict(loss=PrivacyLoss.zcdp(Fraction(1)), delta=DELTA, rule=Rule.OPTIMAL), "gaussian"),
        (dict(loss=PURE, delta=DELTA, rule=Rule.OPTIMAL, policy=Policy.WEIGHTED), "per key"),
    ],
)
def test_plan_refusals_say_what_to_change(kwargs: dict, words: str) -> None:
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        plan_selection(**kwargs)


def test_default_rule_is_the_smaller_tau() -> None:
    """Pure: the optimal rule for one moved key; from two, the optimal rule (Δ-scaling) or a
    discrete Gaussian threshold, whichever has the smaller τ (at ε = 0.347, δ = 1e-6 the
    Gaussian from G = 3: τ 101 against 105, with δ the maximum over splits of a unit's keys
    into lone and shared ones; at G = 2, 81 against 71); weighted only when named. zCDP:
    weighted from G = 2."""
    zcdp = PrivacyLoss.zcdp(Fraction(3, 50))
    chosen = {g: plan_selection(PURE, DELTA, g) for g in (1, 2, 3)}
    assert [chosen[g].rule.value for g in (1, 2, 3)] == [
        "optimal",
        "optimal",
        "gaussian_threshold",
    ]
    for g in (2, 3):
        other = Rule.GAUSSIAN if chosen[g].rule is Rule.OPTIMAL else Rule.OPTIMAL
        assert chosen[g].tau() < plan_selection(PURE, DELTA, g, rule=other).tau()
    assert all(plan.policy is Policy.PER_KEY for plan in chosen.values())
    named = plan_selection(PURE, DELTA, 4, policy=Policy.WEIGHTED)
    assert (named.rule, named.policy) == (Rule.LAPLACE, Policy.WEIGHTED)
    assert [plan_selection(zcdp, DELTA, g).policy.value for g in (1, 2)] == ["per_key", "weighted"]


# --------------------------------------------------------------------------- planner and manifest


def test_planner_report_states_tau_keep_table_and_delta_left() -> None:
    plan = plan_selection(PURE, DELTA, 5, policy=Policy.WEIGHTED)
    report = plan_report(plan, ["diagnosis"], scope_delta=Fraction(1, 10**5), spent=DELTA)
    assert [row.units for row in report.keep] == [1, 5, 10, 20, 50, 100, 1000]
    assert report.keep[0].probability_at_max_keys <= float(DELTA)
    assert report.delta_left == pytest.approx(8e-6)
    entry = report.entry
    assert (entry.mechanism, entry.policy, entry.max_keys_per_unit) == (
        "laplace_threshold",
        "weighted",
        5,
    )
    assert entry.tau == plan.tau(1) < entry.tau_at_max_keys == plan.tau(5)
    assert entry.delta_spent_exact == "1/1000000" and entry.rho is None
    assert "nothing is said about them" in entry.keys


def test_planner_refuses_a_delta_that_does_not_fit() -> None:
    plan = plan_selection(PURE, DELTA)
    with pytest.raises(ValueError, match="spend a smaller δ per release"):
        plan_report(plan, ["diagnosis"], scope_delta=DELTA, spent=Fraction(1, 10**7))


def test_the_manifest_entry_shows_nothing_about_data() -> None:
    """The entry is a function of the plan: two plans alike give equal entries."""
    a = selection_entry(plan_selection(PURE, DELTA), ["dx"])
    b = selection_entry(plan_selection(PURE, DELTA), ["dx"])
    assert a == b and a.model_dump()["tau"] == 36
