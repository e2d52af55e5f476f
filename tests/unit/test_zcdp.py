"""zCDP: ρ_max from an odds profile, the odds statement at δ, the ledger in ρ, the budget
decision's measure and mechanism, and Gaussian accounting from exact L2 sensitivities."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from helpers import BASE_SPEC, make_spec

from dprelease.budget import (
    ConstantProfile,
    PiecewiseLinearProfile,
    cap_from_profile,
    choose_budget_for,
)
from dprelease.budget._zcdp import log_odds_bound, rho_for_log_bound
from dprelease.change import ProtectedChange
from dprelease.errors import ConfigError, MeasureMismatch, SpecError
from dprelease.ledger import Ledger, ScopeTerms
from dprelease.loss import Measure, Mechanism, PrivacyLoss, pure_within_zcdp
from dprelease.mechanism import allocate
from dprelease.publish import decide_budget

ADD, SUB = ProtectedChange.ADD_REMOVE, ProtectedChange.SUBSTITUTE

#: ρ_max computed independently (bisection on 4ρ + 4√(ρL) = ln B_min, resp. ρ + 2√(ρL) =
#: ln B_min, at 50 digits with mpmath), for B_min, neighbours and δ.
RHO_MAX = [
    (2, ADD, 1e-6, 0.00212064906605376),
    (2, ADD, 1e-9, 0.00142527639502960),
    (2, ADD, 1e-12, 0.00107333978290540),
    (3000, ADD, 1e-6, 0.227751873384035),
    (3000, ADD, 1e-9, 0.163103597448246),
    (3000, ADD, 1e-12, 0.127157905420036),
    (5, ADD, 1e-6, 0.0110816285036364),
    (5, ADD, 1e-9, 0.00752275435963471),
    (5, ADD, 1e-12, 0.00569443861295865),
    (2, SUB, 1e-6, 0.00848259626421505),
    (2, SUB, 1e-9, 0.00570110558011841),
    (3000, SUB, 1e-9, 0.652414389792986),
    (5, SUB, 1e-12, 0.0227777544518346),
]


@pytest.mark.parametrize("bound, change, delta, expected", RHO_MAX)
def test_rho_max_matches_an_independent_computation(
    bound: float, change: ProtectedChange, delta: float, expected: float
) -> None:
    choice = choose_budget_for(
        ConstantProfile(bound), neighbours=change, measure=Measure.ZCDP, delta=delta
    )
    assert choice.zcdp is not None
    assert choice.zcdp.rho_max == pytest.approx(expected, rel=1e-13)
    cap = cap_from_profile(choice)
    assert cap <= Fraction(expected) and float(cap) == pytest.approx(expected, abs=2e-12)
    # the statement at ρ_max is exactly the profile's factor
    assert log_odds_bound(choice.zcdp.rho_max, delta, change) == pytest.approx(math.log(bound))


def test_the_papers_case_control_profile_and_its_odds_statement() -> None:
    """The paper's profile: B_min = 2 at P10 = 1, so ε_min = ½ ln 2 and, at δ = 1e-9, a release
    at ρ_max multiplies any adversary's odds by at most 2 with probability ≥ 1 − 1e-9."""
    profile = PiecewiseLinearProfile([[0, 10], [1, 2], [10, 5]])
    choice = choose_budget_for(profile, measure=Measure.ZCDP, delta=1e-9)
    assert choice.zcdp is not None
    assert choice.epsilon_min == pytest.approx(0.5 * math.log(2))
    assert choice.zcdp.rho_max == pytest.approx(0.00142527639502960, rel=1e-13)
    assert choice.zcdp.odds_factor(choice.zcdp.rho_max, ADD) == pytest.approx(2.0)
    household = {row.k: row for row in choice.group_privacy}
    assert household[2].rho == pytest.approx(4 * choice.zcdp.rho)  # group privacy: k²ρ
    assert household[2].odds_factor == pytest.approx(
        math.exp(log_odds_bound(4 * choice.zcdp.rho, 1e-9, ADD))
    )


def test_rho_for_each_p10_is_largest_where_the_profile_is_loosest() -> None:
    loose, strict = (
        rho_for_log_bound(math.log(20), 1e-9, ADD),
        rho_for_log_bound(math.log(2), 1e-9, ADD),
    )
    assert loose > strict > 0
    assert rho_for_log_bound(math.log(2), 1e-9, SUB) == pytest.approx(4 * strict)


def test_zcdp_needs_a_delta_and_refuses_the_prior_risk_companion() -> None:
    with pytest.raises(ConfigError, match="delta"):
        choose_budget_for(ConstantProfile(3), measure=Measure.ZCDP)
    with pytest.raises(ConfigError, match="strictly between 0 and 1"):
        choose_budget_for(ConstantProfile(3), measure=Measure.ZCDP, delta=1.5)
    with pytest.raises(ConfigError, match="pure ε-DP"):
        choose_budget_for(
            ConstantProfile(3), measure=Measure.ZCDP, delta=1e-9, prior_risk_epsilon=0.2
        )
    with pytest.raises(ConfigError, match="δ belongs to measure: zcdp"):
        choose_budget_for(ConstantProfile(3), delta=1e-9)


def test_a_pure_release_fits_a_zcdp_share_at_the_largest_epsilon_within_it() -> None:
    for rho in (Fraction(1, 100), Fraction(1, 3), Fraction(7, 2)):
        epsilon = pure_within_zcdp(rho)
        assert epsilon * epsilon / 2 <= rho < (epsilon + Fraction(1, 10**12)) ** 2 / 2


# -- the ledger in ρ -----------------------------------------------------------------------------


def test_a_zcdp_scope_charges_rho_exactly_and_keeps_its_measure(ledger_url: str) -> None:
    with Ledger(ledger_url) as ledger:
        ledger.ensure_scope("survey", Fraction(1, 10), measure=Measure.ZCDP, delta=1e-9)
        for month in range(1, 4):
            ledger.reserve(
                f"r/2024-0{month}",
                "survey",
                f"2024-0{month}",
                Fraction(1, 30),
                spec_hash="h",
                terms=ScopeTerms(measure=Measure.ZCDP, delta=1e-9),
            )
        status = ledger.status("survey")[0]
        assert (status.measure, status.unit, status.spent) == (Measure.ZCDP, "ρ", Fraction(1, 10))
        rho = 0.1
        assert status.epsilon_delta() == pytest.approx(rho + 2 * math.sqrt(rho * math.log(1e9)))
        with pytest.raises(MeasureMismatch, match="spends ρ"):
            ledger.reserve(
                "pure/-", "survey", None, Fraction(1, 100), spec_hash="h", terms=ScopeTerms()
            )
        with pytest.raises(MeasureMismatch, match="never changes"):
            ledger.ensure_scope("survey", 1)  # a pure scope of the same name
        with pytest.raises(MeasureMismatch, match="δ never changes"):
            ledger.ensure_scope("survey", 1, measure=Measure.ZCDP, delta=1e-6)
        assert ledger.status("survey")[0].to_dict()["unit"] == "ρ"


def test_scope_names_have_one_spelling(ledger_url: str) -> None:
    with Ledger(ledger_url) as ledger:
        ledger.ensure_scope("hospital_patients", 1)
        for alias in (
            "Hospital_Patients",
            "hospital_patients ",
            "hospital_patients\n",
            "ｈospital",
        ):
            with pytest.raises(Exception, match="scope"):
                ledger.ensure_scope(alias, 1)
        assert [s.name for s in ledger.status()] == ["hospital_patients"]


# -- the budget decision -------------------------------------------------------------------------


def _zcdp_profiles(tmp_path: object, delta: float = 1e-9):  # type: ignore[no-untyped-def]
    from pathlib import Path

    from dprelease.budget import load_privacy_profiles

    path = Path(str(tmp_path)) / "privacy.yaml"
    path.write_text(
        "privacy:\n  profile: {kind: constant, bound: 3000}\n"
        f"  measure: zcdp\n  delta: {delta}\n  rounding: 0.001\n"
    )
    return load_privacy_profiles(path)


def test_a_zcdp_profile_makes_a_gaussian_release_in_rho(tmp_path: object) -> None:
    resolved = make_spec()
    budget = decide_budget(resolved, privacy=_zcdp_profiles(tmp_path))
    assert budget.loss == PrivacyLoss.zcdp(Fraction(163, 1000))
    assert (budget.mechanism, budget.delta) == (Mechanism.GAUSSIAN, 1e-9)


def test_a_laplace_spec_in_a_zcdp_scope_is_charged_rho(tmp_path: object) -> None:
    resolved = make_spec(BASE_SPEC, mechanism="laplace")
    budget = decide_budget(resolved, privacy=_zcdp_profiles(tmp_path))
    assert budget.mechanism is Mechanism.LAPLACE and budget.loss is not None
    allocation = allocate(resolved, budget.loss, budget.change, budget.mechanism)
    for m in allocation.measurements:
        assert m.loss.measure is Measure.ZCDP
        assert m.epsilon is not None and m.epsilon * m.epsilon / 2 <= m.loss.amount
    assert sum(m.loss.amount for m in allocation.measurements) == budget.loss.amount


def test_gaussian_noise_is_refused_in_a_pure_scope_and_epsilon_in_a_zcdp_one(
    tmp_path: object,
) -> None:
    with pytest.raises(SpecError, match="release.mechanism: the Gaussian mechanism is ρ-zCDP"):
        decide_budget(make_spec(BASE_SPEC, mechanism="gaussian"), epsilon=Fraction(1))
    with pytest.raises(ConfigError, match="state the release's loss as rho"):
        decide_budget(make_spec(), privacy=_zcdp_profiles(tmp_path), epsilon=Fraction(1))


def test_gaussian_noise_is_calibrated_to_the_exact_l2_sensitivity() -> None:
    """Counts by region, a unit keeps ≤ 4 rows, ≤ 1 per region: Δ1 = 4 but Δ2 = 2 (add/remove),
    so σ² = Δ2²/(2ρ) = 4/(2·(1/100)) = 200 for the cells."""
    resolved = make_spec(
        BASE_SPEC,
        max_rows_per_unit=3,
        max_groups_per_unit=3,
        max_rows_per_group=1,
        statistics=[{"name": "n", "kind": "count"}],
    )
    allocation = allocate(resolved, PrivacyLoss.zcdp(Fraction(1, 100)), ADD, Mechanism.GAUSSIAN)
    (count,) = allocation.measurements
    assert (count.sensitivity_units, count.sensitivity_squared_units) == (3, 3)
    assert count.sigma2_units == Fraction(3, 2) / Fraction(1, 100)
    assert count.sensitivity == pytest.approx(math.sqrt(3))
