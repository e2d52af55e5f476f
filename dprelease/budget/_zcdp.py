"""The odds statement under ρ-zCDP, and the largest ρ a profile allows.

Under ρ-zCDP a release has no worst-case bound on the likelihood ratio of eq. 12, but a tail
bound (Bun & Steinke 2016, via the Rényi divergence): for ρ'-zCDP the privacy loss exceeds
ε_δ(ρ') = ρ' + 2·√(ρ'·log(1/δ)) with probability at most δ, whichever neighbouring dataset is
the true one. Changing one person's value is a group of k neighbouring changes (k = 2 under
add/remove, 1 under substitute; `ProtectedChange.value_change_group`), and group privacy for
zCDP is k²ρ, so with probability at least 1 − δ over the release

    R10 ≤ exp(k²ρ + 2k·√(ρ·log(1/δ))) · P10.

A profile B(P10) then allows, at each P10, the largest ρ with k²ρ + 2k√(ρL) ≤ log B(P10)
(L = log 1/δ): ρ_P10 = ((√(L + log B) − √L)/k)², and a release that honours the whole profile
uses ρ_max = ρ at B_min. PRIVACY.md states the derivation and its assumptions.
"""

from __future__ import annotations

import math

from dprelease.change import ProtectedChange


def log_odds_bound(rho: float, delta: float, change: ProtectedChange) -> float:
    """ε_δ of a change of one person's value under ρ-zCDP: with probability ≥ 1 − δ over the
    release, log(R10 / P10) ≤ this."""
    k = change.value_change_group
    tail = math.log(1.0 / delta)
    return k * k * rho + 2.0 * k * math.sqrt(rho * tail)


def rho_for_log_bound(log_bound: float, delta: float, change: ProtectedChange) -> float:
    """The largest ρ whose `log_odds_bound` is at most `log_bound` (≥ 0).

    √(L + b) − √L is computed as b / (√(L + b) + √L), which has no cancellation when L ≫ b."""
    tail = math.log(1.0 / delta)
    root = log_bound / (math.sqrt(tail + log_bound) + math.sqrt(tail))
    return (root / change.value_change_group) ** 2


def delta_problem(delta: float) -> str | None:
    """Why `delta` cannot be the probability that the odds statement fails (None: it can)."""
    if not (math.isfinite(delta) and 0.0 < delta < 1.0):
        return f"δ = {delta} must be a probability strictly between 0 and 1, e.g. 1e-9"
    return None
