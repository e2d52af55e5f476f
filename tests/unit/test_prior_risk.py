"""The companion posterior-to-prior selector against Theorem 2 as written and brute force."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from dprelease.budget import (
    ConstantRelativeRisk,
    FloorRelativeRiskFixedP,
    FloorRelativeRiskFixedQ,
    theorem2_epsilon,
)
from dprelease.errors import ConfigError


def theorem2_as_written(p: float, q: float, rstar: float) -> float:
    """Kazan & Reiter's Theorem 2 literally, for cross-checking the stable form."""
    if q == 1:
        return math.log((1 - p) / (1 / rstar - p))
    root = math.sqrt((1 - p) ** 2 + 4 * p * (1 - q) * (1 / rstar - p * q))
    return math.log(2 * p * (1 - q) / (root - (1 - p)))


@pytest.mark.parametrize(
    ("p", "q", "rstar"), [(0.3, 0.2, 3.0), (0.9, 0.5, 1.5), (0.01, 0.99, 20.0), (0.5, 1.0, 1.8)]
)
def test_stable_form_equals_theorem_as_written(p: float, q: float, rstar: float) -> None:
    # rel 1e-9, not 1e-15: the written form cancels (sqrt(·) − (1 − p)) when p·(1 − q) is small.
    assert float(theorem2_epsilon(p, q, 1 / rstar)) == pytest.approx(
        theorem2_as_written(p, q, rstar), rel=1e-9
    )


def test_hand_values_of_theorem2() -> None:
    # p = 1: ε = ½ log((1 − q)/(1/r* − q)). With q = ½, r* = 4 the bound is vacuous (1/r* < p·q);
    # with r* = 1.5 it is ½ log(½ / (2/3 − ½)) = ½ log 3.
    assert float(theorem2_epsilon(1.0, 0.5, 1 / 4)) == math.inf
    assert float(theorem2_epsilon(1.0, 0.5, 1 / 1.5)) == pytest.approx(0.5 * math.log(3))
    # q = 1, p = ¼, r* = 2: (1 − ¼) / (½ − ¼) = 3.
    assert float(theorem2_epsilon(0.25, 1.0, 0.5)) == pytest.approx(math.log(3))
    # p → 0: the bound is ε = log r* (the prior p·q vanishes, the posterior may reach r* times it).
    assert float(theorem2_epsilon(0.0, 0.3, 1 / 5)) == pytest.approx(math.log(5))


@pytest.mark.parametrize("r", [1.01, 1.5, 2.0, 3.0, 10.0, 1000.0])
def test_constant_profile_gives_half_log_r_and_brute_force_agrees(r: float) -> None:
    result = ConstantRelativeRisk(r).epsilon()
    assert result.closed_form and result.epsilon == pytest.approx(0.5 * math.log(r), abs=1e-15)
    assert (result.p, result.q) == (1.0, 0.0)
    p, q = np.meshgrid(np.linspace(0, 1, 801), np.linspace(0, 1, 801))
    brute = theorem2_epsilon(p, q, 1 / r)
    assert brute.min() >= result.epsilon - 1e-12  # never below the closed form
    assert brute.min() == pytest.approx(result.epsilon, abs=1e-9)  # reached at p = 1, q = 0
    assert float(theorem2_epsilon(1.0, 0.0, 1 / r)) == pytest.approx(result.epsilon)


def test_fixed_q_one_has_its_minimum_at_the_kink() -> None:
    # q = 1: for p < a/r, r* = a/p and ε = log((1−p)·a/(p(1−a))) falls; above, r* = r and
    # ε = log((1−p)/(1/r − p)) rises. So p* = a/r and ε = log((r − a)/(1 − a)).
    a, r = 0.5, 1.5
    result = FloorRelativeRiskFixedQ(a=a, r=r, q=1.0).epsilon()
    assert result.epsilon == pytest.approx(math.log((r - a) / (1 - a)), abs=1e-6)
    assert result.epsilon == pytest.approx(math.log(2), abs=1e-6)
    assert result.p == pytest.approx(a / r, abs=1e-4)


def test_fixed_p_one_has_its_minimum_at_the_kink() -> None:
    # p = 1: ε = ½ log((1−q)/(1/r* − q)); below q = a/r the a-branch falls, above the r-branch
    # rises, so ε = ½ log((r − a)/(1 − a)) at q = a/r.
    a, r = 0.2, 4.0
    result = FloorRelativeRiskFixedP(a=a, r=r, p=1.0).epsilon()
    assert result.epsilon == pytest.approx(0.5 * math.log((r - a) / (1 - a)), abs=1e-6)
    assert result.q == pytest.approx(a / r, abs=1e-4)


@pytest.mark.parametrize(("a", "r", "fixed"), [(0.05, 2.0, 0.3), (0.01, 3.0, 0.7), (0.3, 1.2, 0.1)])
def test_numerical_minimum_matches_a_dense_grid(a: float, r: float, fixed: float) -> None:
    grid = np.linspace(0, 1, 2_000_001)
    by_q = FloorRelativeRiskFixedQ(a=a, r=r, q=fixed)
    brute_q = theorem2_epsilon(grid, fixed, by_q.inverse_bound(grid, fixed)).min()
    assert by_q.epsilon().epsilon == pytest.approx(brute_q, abs=1e-4)
    assert by_q.epsilon().epsilon <= brute_q + 1e-12
    by_p = FloorRelativeRiskFixedP(a=a, r=r, p=fixed)
    brute_p = theorem2_epsilon(fixed, grid, by_p.inverse_bound(fixed, grid)).min()
    assert by_p.epsilon().epsilon == pytest.approx(brute_p, abs=1e-4)
    assert by_p.epsilon().epsilon <= brute_p + 1e-12


def test_numerical_minimum_matches_scipy() -> None:
    optimize = pytest.importorskip("scipy.optimize")
    profile = FloorRelativeRiskFixedP(a=0.05, r=2.0, p=0.3)

    def objective(q: float) -> float:
        return float(theorem2_epsilon(0.3, q, profile.inverse_bound(0.3, q)))

    kink = 0.05 / (2.0 * 0.3)
    options = {"xatol": 1e-12}
    best = min(
        optimize.minimize_scalar(objective, bounds=b, method="bounded", options=options).fun
        for b in [(1e-9, kink), (kink, 1.0)]
    )
    assert profile.epsilon().epsilon == pytest.approx(best, abs=1e-6)


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: ConstantRelativeRisk(1.0), "r"),
        (lambda: ConstantRelativeRisk(math.inf), "r"),
        (lambda: FloorRelativeRiskFixedQ(a=0.0, r=2.0, q=0.5), "a"),
        (lambda: FloorRelativeRiskFixedQ(a=0.1, r=2.0, q=0.0), "q"),
        (lambda: FloorRelativeRiskFixedP(a=0.1, r=0.5, p=0.5), "r"),
        (lambda: FloorRelativeRiskFixedP(a=0.1, r=2.0, p=1.5), "p"),
    ],
)
def test_invalid_relative_risk_profiles_name_the_field(
    build: Callable[[], object], field: str
) -> None:
    with pytest.raises(ConfigError, match=rf"^{field}: {field} = "):
        build()
