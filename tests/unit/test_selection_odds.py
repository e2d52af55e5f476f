"""PRIVACY.md's odds statements with key selection, checked by exact enumeration.

A value change of person i moves one key from count n0 + 1 to n0 (i's old key) and another from
n1 to n1 + 1 (i's new key); with one key per unit nothing else moves. With only two binary
decisions the release has four outcomes, so the privacy loss L = ln(P_0/P_1) and its tail are
computed exactly (floating point on exact keep probabilities) for every pair of counts up to
certainty, and compared with the bounds PRIVACY.md derives:

- pure, optimal rule at (ε, δ): sup_A P_0(A) − e^{2ε}P_1(A) ≤ (1 + e^ε)δ, and for η > 0,
  P_0(L > 2ε + η) ≤ (1 + e^ε)δ/(1 − e^{−η}); the tail lemma is sharp for one key;
- zCDP, Gaussian thresholding at (ρ, δ_S), read at δ: P_0(L > 4ρ + 4√(ρ ln(1/δ)) + ln(1/(1 − δ_S)))
  ≤ δ + δ_S (the adversary who knows everyone else).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from dprelease.loss import PrivacyLoss
from dprelease.mechanism.selection import keep_table, plan_selection

EPSILON = Fraction("0.347")
DELTA = Fraction(1, 10**3)  # large, so that every bound is far above float rounding


def outcomes(k0a: float, k0b: float, k1a: float, k1b: float) -> list[tuple[float, float]]:
    """(P_0, P_1) of the four outcomes: key 0 kept with k0a under D_0 and k0b under D_1, key 1
    with k1a and k1b."""
    pairs = []
    for keep0, keep1 in itertools.product((True, False), repeat=2):
        p0 = (k0a if keep0 else 1 - k0a) * (k1a if keep1 else 1 - k1a)
        p1 = (k0b if keep0 else 1 - k0b) * (k1b if keep1 else 1 - k1b)
        pairs.append((p0, p1))
    return pairs


def hockey_stick(pairs: list[tuple[float, float]], gamma: float) -> float:
    return sum(max(p0 - gamma * p1, 0.0) for p0, p1 in pairs)


def tail(pairs: list[tuple[float, float]], threshold: float) -> float:
    """P_0(ln(P_0/P_1) > threshold)."""
    return sum(p0 for p0, p1 in pairs if p0 > 0 and (p1 == 0 or math.log(p0 / p1) > threshold))


def optimal_keep() -> list[float]:
    table = keep_table(EPSILON, DELTA)
    return [float(sum(table.bounds(n)) / 2) for n in range(table.certain + 2)]


def test_pure_value_change_within_group_privacy() -> None:
    p = optimal_keep()
    eps = float(EPSILON)
    worst = max(
        hockey_stick(outcomes(p[n0 + 1], p[n0], p[n1], p[n1 + 1]), math.exp(2 * eps))
        for n0 in range(len(p) - 1)
        for n1 in range(len(p) - 1)
    )
    assert worst <= (1 + math.exp(eps)) * float(DELTA) * (1 + 1e-9)


@pytest.mark.parametrize("eta", [0.01, 0.05, 0.5])
def test_pure_odds_tail_within_the_stated_bound(eta: float) -> None:
    p = optimal_keep()
    eps = float(EPSILON)
    bound = (1 + math.exp(eps)) * float(DELTA) / (1 - math.exp(-eta))
    worst = max(
        tail(outcomes(p[n0 + 1], p[n0], p[n1], p[n1 + 1]), 2 * eps + eta)
        for n0 in range(len(p) - 1)
        for n1 in range(len(p) - 1)
    )
    assert worst <= bound


def test_the_tail_lemma_is_sharp_for_one_key() -> None:
    """One key, one neighbour: sup over n of P(L > ε + η) reaches δ/(1 − e^{−η}) up to the
    grid of counts (within a factor e^ε): no bound c·δ at η = 0 can hold."""
    p = optimal_keep()
    eps, eta = float(EPSILON), 0.05
    worst = max(
        p[n] if p[n - 1] == 0 or math.log(p[n] / p[n - 1]) > eps + eta else 0.0
        for n in range(1, len(p))
    )
    bound = float(DELTA) / (1 - math.exp(-eta))
    assert bound * math.exp(-eps) < worst <= bound


def test_zcdp_value_change_within_the_stated_bound() -> None:
    rho, delta_s, delta = Fraction(1, 20), Fraction(1, 10**4), 1e-3
    plan = plan_selection(PrivacyLoss.zcdp(rho), delta_s)
    top = 2 * plan.tau() + 20
    keep = np.concatenate([[0.0], plan.keep_probability(np.arange(1, top + 2))])
    beta = float(plan.delta_bound or delta_s)
    r = float(rho)
    s = 4 * r + 4 * math.sqrt(r * math.log(1 / delta)) + math.log(1 / (1 - beta))
    worst = max(
        tail(outcomes(keep[n0 + 1], keep[n0], keep[n1], keep[n1 + 1]), s)
        for n0 in range(top)
        for n1 in range(top)
    )
    assert worst <= delta + beta
