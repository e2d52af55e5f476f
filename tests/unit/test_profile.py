"""Odds risk profiles: the paper's numbers, exact minima, validation messages, properties."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dprelease.budget import (
    Adversary,
    ConstantProfile,
    PiecewiseLinearProfile,
    StepProfile,
    cap_from_profile,
    choose_budget_for,
    epsilon_for_bound,
    epsilon_min,
    group_privacy,
    prior_odds_ratio,
    round_down,
)
from dprelease.change import ProtectedChange
from dprelease.errors import ConfigError, ProfileError

PAPER = PiecewiseLinearProfile([[0, 10], [1, 2], [10, 5]])


def test_paper_epsilon_min_is_half_log_two_at_p10_one() -> None:
    lowest = epsilon_min(PAPER)
    assert lowest.epsilon == pytest.approx(0.5 * math.log(2), abs=1e-15)
    assert round(lowest.epsilon, 4) == 0.3466
    assert (lowest.p10, lowest.bound, lowest.attained) == (1.0, 2.0, True)


def test_paper_prevalence_adversary_has_p10_799_and_bound_5() -> None:
    prevalence = Adversary("prevalence", q=0.5, q0=0.00125)
    assert prevalence.p10 == pytest.approx(799.0)
    assert float(PAPER.bound(prevalence.p10)) == 5.0
    choice = choose_budget_for(PAPER, adversaries=[prevalence])
    assert choice.adversaries[0].epsilon == pytest.approx(0.5 * math.log(5))
    assert round(choice.adversaries[0].epsilon, 4) == 0.8047
    # The chosen ε lets the posterior odds ratio reach e^{2ε}·P10 = 2·799.
    assert choice.adversaries[0].max_posterior_odds_ratio == pytest.approx(2 * 799)


def test_substitute_neighbours_give_log_two() -> None:
    assert epsilon_min(PAPER, ProtectedChange.SUBSTITUTE).epsilon == pytest.approx(math.log(2))
    rows = group_privacy(math.log(2), ProtectedChange.SUBSTITUTE)
    assert [row.odds_factor for row in rows] == pytest.approx([2, 4, 8, 16, 32])


def test_group_privacy_add_remove_multiplies_epsilon_and_squares_odds() -> None:
    rows = group_privacy(0.3)
    assert [row.k for row in rows] == [1, 2, 3, 4, 5]
    assert [row.epsilon for row in rows] == pytest.approx([0.3, 0.6, 0.9, 1.2, 1.5])
    assert rows[2].odds_factor == pytest.approx(math.exp(1.8))


def test_piecewise_linear_evaluation_is_vectorized_and_constant_outside() -> None:
    p10 = np.array([0.0, 0.5, 1.0, 5.5, 10.0, 1e9])
    assert PAPER.bound(p10) == pytest.approx([10, 6, 2, 3.5, 5, 5])
    before_first = PiecewiseLinearProfile([[2, 3], [4, 7]])
    assert before_first.bound([0.001, 1.0, 3.0]) == pytest.approx([3, 3, 5])


def test_infimum_only_approached_at_zero_is_reported_as_a_limit() -> None:
    rising = PiecewiseLinearProfile([[0, 1.5], [1, 4]])
    lowest = epsilon_min(rising)
    assert (lowest.p10, lowest.bound, lowest.attained) == (0.0, 1.5, False)
    assert lowest.epsilon == pytest.approx(0.5 * math.log(1.5))


def test_minimum_on_the_tail_is_at_the_last_point() -> None:
    falling = PiecewiseLinearProfile([[0, 9], [1, 4], [3, 1.2]])
    assert epsilon_min(falling).p10 == 3.0
    assert epsilon_min(falling).bound == 1.2


def test_step_profile_breakpoints_belong_to_the_right_step() -> None:
    step = StepProfile([[0, 6], [1, 2], [10, 4]])
    assert step.bound([0.5, 1.0, 9.999, 10.0, 1e6]) == pytest.approx([6, 2, 2, 4, 4])
    lowest = epsilon_min(step)
    assert (lowest.p10, lowest.bound, lowest.attained) == (1.0, 2.0, True)


def test_step_profile_minimum_on_first_step_holds_from_zero() -> None:
    step = StepProfile([[0.5, 2], [3, 5]])
    assert step.bound([0.1, 0.5, 3]) == pytest.approx([2, 2, 5])
    lowest = epsilon_min(step)
    assert (lowest.p10, lowest.bound, lowest.attained) == (0.0, 2.0, True)


def test_individual_profiles_use_the_smallest_epsilon() -> None:
    lowest = epsilon_min([PAPER, ConstantProfile(1.5), ConstantProfile(3)])
    assert lowest.profile_index == 1
    assert lowest.epsilon == pytest.approx(0.5 * math.log(1.5))


def test_choose_budget_rounds_down_and_keeps_epsilon_min() -> None:
    choice = choose_budget_for(PAPER, rounding=0.05)
    assert choice.epsilon == 0.3
    assert choice.epsilon_min == pytest.approx(0.34657359)
    assert choice.group_privacy[0].epsilon == 0.3


def test_rounding_does_not_fall_a_step_on_float_artefacts() -> None:
    assert round_down(0.35, 0.05) == 0.35
    assert round_down(0.3, 0.1) == 0.3
    assert round_down(0.30000000000000004, 0.1) == 0.3
    assert round_down(0.2999999, 0.1) == pytest.approx(0.2)


def _half_log(bound: int) -> Decimal:
    """½·ln B to 50 digits: the true ε_min of a constant profile B."""
    with localcontext() as context:
        context.prec = 50
        return Decimal(bound).ln() / 2


@pytest.mark.parametrize("bound", [2, 3, 5, 9, 10, 12])
def test_cap_from_a_profile_is_rounded_down_below_the_true_epsilon(bound: int) -> None:
    """The float ε (and the decimal it prints as) can lie above ½·ln B; the cap never does,
    and it stays within 2·10^-12 of it."""
    true = _half_log(bound)
    cap = cap_from_profile(choose_budget_for(ConstantProfile(bound)))
    assert cap.denominator <= 10**12
    assert Decimal(cap.numerator) / Decimal(cap.denominator) < true
    assert true - Decimal(cap.numerator) / Decimal(cap.denominator) < Decimal("2e-12")


def test_the_decimal_of_a_profile_float_can_exceed_the_true_epsilon() -> None:
    """Why `cap_from_profile` exists: for B = 3 the old conversion overstated the cap."""
    decimal = Fraction(repr(choose_budget_for(ConstantProfile(3)).epsilon))
    assert Decimal(decimal.numerator) / Decimal(decimal.denominator) > _half_log(3)


def test_cap_from_a_rounded_profile_is_the_exact_grid_value() -> None:
    assert cap_from_profile(choose_budget_for(PAPER, rounding=0.05)) == Fraction(3, 10)
    assert cap_from_profile(choose_budget_for(PAPER)) == Fraction(346573590279, 10**12)


def test_a_rounding_step_above_epsilon_min_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"^rounding: .*gives 0"):
        choose_budget_for(PAPER, rounding=0.5)


def test_a_profile_with_b_equal_one_allows_no_release() -> None:
    with pytest.raises(ProfileError, match=r"^profile: B = 1 at P10 = 1"):
        choose_budget_for(PiecewiseLinearProfile([[0, 3], [1, 1], [2, 3]]))


@pytest.mark.parametrize(
    ("points", "pattern"),
    [
        ([[0, 10], [1, 2], [10, 0.8]], r"^points\[2\]: B = 0.8 < 1"),
        ([[0, 10], [1, math.inf]], r"^points\[1\]: .*not finite"),
        ([[0, 10], [math.nan, 2]], r"^points\[1\]: .*not finite"),
        ([[-1, 10], [1, 2]], r"^points\[0\]: P10 = -1.0 is negative"),
        ([[0, 10], [5, 2], [3, 4]], r"^points\[2\]: P10 = 3.0 is not greater .* 5.0"),
        ([[0, 10], [1, 2], [1, 4]], r"^points\[2\]: .*without duplicates"),
        ([[0, 10]], r"^points: a piecewise_linear profile needs at least 2"),
        ([[0, 10, 3], [1, 2]], r"^points\[0\]: a point is a pair"),
    ],
)
def test_invalid_points_name_the_offending_point(points: list[list[float]], pattern: str) -> None:
    with pytest.raises(ProfileError, match=pattern):
        PiecewiseLinearProfile(points)


def test_step_and_constant_validation_name_the_field() -> None:
    with pytest.raises(ProfileError, match=r"^points: a step profile needs at least 1"):
        StepProfile([])
    with pytest.raises(ProfileError, match=r"^points\[1\]: B = 0.5 < 1"):
        StepProfile([[0, 2], [1, 0.5]])
    with pytest.raises(ProfileError, match=r"^bound: B = 0.9"):
        ConstantProfile(0.9)


@pytest.mark.parametrize(("q", "q0", "field"), [(0.0, 0.5, "q"), (0.5, 1.0, "q0"), (2, 0.5, "q")])
def test_adversary_priors_outside_zero_one_are_rejected_by_name(
    q: float, q0: float, field: str
) -> None:
    with pytest.raises(ConfigError, match=rf"^{field}: {field} = "):
        Adversary("a", q, q0)


def test_prior_odds_ratio_formula() -> None:
    assert prior_odds_ratio(0.5, 0.5) == 1.0
    assert prior_odds_ratio(0.2, 0.5) == pytest.approx(0.25)
    assert prior_odds_ratio(0.5, 0.00125) == pytest.approx(799.0)


# --- properties --------------------------------------------------------------------------------

bounds = st.floats(min_value=1.0, max_value=1e6, allow_nan=False)
p10_values = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)


@st.composite
def linear_profiles(draw: st.DrawFn) -> list[list[float]]:
    starts = draw(st.lists(p10_values, min_size=2, max_size=8, unique=True))
    return [[p, draw(bounds)] for p in sorted(starts)]


@given(linear_profiles(), st.floats(min_value=1e-9, max_value=1e9), st.booleans())
def test_epsilon_min_is_below_epsilon_at_every_p10(
    points: list[list[float]], p10: float, substitute: bool
) -> None:
    change = ProtectedChange.SUBSTITUTE if substitute else ProtectedChange.ADD_REMOVE
    for profile in (PiecewiseLinearProfile(points), StepProfile(points)):
        at_p10 = float(epsilon_for_bound(change, profile.bound(p10)))
        assert epsilon_min(profile, change).epsilon <= at_p10


@given(linear_profiles(), st.booleans())
def test_epsilon_min_is_attained_at_its_p10(points: list[list[float]], substitute: bool) -> None:
    """A lower bound alone would pass for ε_min ≡ 0: ε_min must also be reached (or approached
    as P10 → 0⁺) at the P10 it reports, and equal ε at the profile's lowest point."""
    change = ProtectedChange.SUBSTITUTE if substitute else ProtectedChange.ADD_REMOVE
    lowest_bound = min(bound for _, bound in points)
    for profile in (PiecewiseLinearProfile(points), StepProfile(points)):
        lowest = epsilon_min(profile, change)
        assert lowest.bound == lowest_bound
        assert lowest.epsilon == float(epsilon_for_bound(change, lowest_bound))
        assert float(profile.bound(lowest.p10)) == pytest.approx(lowest_bound, rel=1e-12)


@given(linear_profiles(), st.data(), st.floats(min_value=0.0, max_value=100.0))
def test_raising_b_anywhere_never_lowers_epsilon_min(
    points: list[list[float]], data: st.DataObject, raise_by: float
) -> None:
    index = data.draw(st.integers(min_value=0, max_value=len(points) - 1))
    raised = [list(point) for point in points]
    raised[index][1] += raise_by
    for kind in (PiecewiseLinearProfile, StepProfile):
        assert epsilon_min(kind(raised)).epsilon >= epsilon_min(kind(points)).epsilon


@given(
    st.floats(min_value=0.0, max_value=50.0, allow_nan=False),
    st.sampled_from([0.01, 0.05, 0.1, 0.25, 0.3, 1.0, "0.05", "0.001"]),
)
def test_rounding_never_rounds_up(epsilon: float, step: float | str) -> None:
    rounded = round_down(epsilon, step)
    assert rounded <= epsilon
    exact_step = Fraction(str(step))
    assert Fraction(epsilon) - Fraction(rounded) < exact_step
    assert (Fraction(rounded) / exact_step).limit_denominator(10**6).denominator == 1
