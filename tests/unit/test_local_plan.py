"""The planner's numbers: local beside central at the same ε, and the identities behind the
ratio the issue quoted (√(n/2) for a yes/no question, √(2n) for a rare answer under OUE)."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

import dprelease as dp
from dprelease.errors import ConfigError
from dprelease.mechanism.noise import laplace_moe95, laplace_variance
from dprelease.mechanism.randomized._estimators import law_of
from dprelease.mechanism.randomized._randomizers import make_randomizer


@pytest.mark.parametrize("epsilon", [Fraction(1, 10), Fraction(1), Fraction(3)])
def test_a_yes_no_count_has_n_over_2_times_the_central_variance(epsilon: Fraction) -> None:
    """k-RR on two answers: per respondent e^ε/(e^ε − 1)²; discrete Laplace of scale 1/ε:
    2e^ε/(e^ε − 1)²: the ratio of SDs is √(n/2) at every ε (≈ 71 at n = 10,000)."""
    plan = dp.local.plan(10_000, 2, epsilon)
    assert plan.chosen.mechanism == "krr"
    assert plan.sd_ratio == pytest.approx(math.sqrt(10_000 / 2), rel=1e-9)
    assert plan.central_sd**2 == pytest.approx(laplace_variance(1 / epsilon), rel=1e-12)
    assert plan.central_moe95 == laplace_moe95(1 / epsilon)


@pytest.mark.parametrize("epsilon", [Fraction(1, 10), Fraction(1), Fraction(3)])
def test_a_rare_answer_under_oue_has_2n_times_the_central_variance(epsilon: Fraction) -> None:
    """OUE at a rare answer: q(1 − q)/(p − q)² = 4e^ε/(e^ε − 1)² per respondent, twice the
    central variance: √(2n) ≈ 141 at n = 10,000. The planner states the worst case (a share
    near one half), which is larger."""
    law = law_of(make_randomizer(list(range(40)), epsilon, "oue"))
    rare = 10_000 * law.q * (1 - law.q) / law.gap**2
    assert math.sqrt(rare / laplace_variance(1 / epsilon)) == pytest.approx(
        math.sqrt(2 * 10_000), rel=1e-9
    )
    plan = dp.local.plan(10_000, 40, epsilon, mechanism="oue")
    assert plan.chosen.mechanism == "oue" and plan.sd_ratio >= math.sqrt(2 * 10_000) - 1e-9


def test_the_target_is_met_by_the_respondents_it_asks_for() -> None:
    plan = dp.local.plan(1_000, 4, "1/2", target=0.02)
    needed = plan.respondents_for_target
    assert needed is not None and needed > 1_000
    assert dp.local.plan(needed, 4, "1/2").chosen.share_moe95 <= 0.02
    assert dp.local.plan(needed - 1, 4, "1/2").chosen.share_moe95 > 0.02


def test_the_rule_and_the_alternatives_are_stated() -> None:
    plan = dp.local.plan(10_000, 31, 1)
    assert plan.chosen.mechanism == "oue"
    by_name = {p.mechanism: p for p in plan.protocols}
    assert by_name["oue"].share_moe95 < by_name["krr"].share_moe95
    assert dp.local.plan(10_000, 31, 1, compact=True).chosen.mechanism == "olh"
    assert "other protocols: krr" in "\n".join(plan.lines())


@pytest.mark.parametrize(
    ("arguments", "field"),
    [((0, 2, 1), "respondents"), ((10, 1, 1), "categories"), ((10, 2, 0), "epsilon")],
)
def test_bad_plans_are_refused(arguments: tuple, field: str) -> None:
    with pytest.raises(ConfigError) as refused:
        dp.local.plan(*arguments)
    assert refused.value.path == field
    with pytest.raises(ConfigError, match="target"):
        dp.local.plan(10, 2, 1, target=2)
