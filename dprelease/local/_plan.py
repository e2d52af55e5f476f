"""The planner: what local DP costs in accuracy, beside central DP at the same ε, before anyone
is asked.

For n respondents and k answers, a count's variance under a local protocol is at most
n·V₁ with V₁ = max(p(1 − p), q(1 − q))/(p − q)² (the formula of `_estimators` at its worst
n_v), so a share's margin is 1.96·√(V₁/n): it shrinks like 1/√n. A central count at ε has
discrete Laplace noise of scale 1/ε whatever n, so a share's margin shrinks like 1/n. For small
ε, V₁ ≈ 1/ε² for k-RR on two answers and ≈ 4/ε² for OUE and OLH, against a central variance of
2/ε²: the local standard deviation is about √(n/2) (k-RR, k = 2) to √(2n) (OUE, OLH) times
the central one — at n = 10,000 about 71 and 141 times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from dprelease.local._adapter import central_count_accuracy
from dprelease.mechanism.randomized import MECHANISMS, Z95, Mechanism, law_of, make_randomizer


@dataclass(frozen=True)
class ProtocolAccuracy:
    """One protocol at the plan's n, k and ε (worst case over the true counts)."""

    mechanism: Mechanism
    per_respondent_variance: float  # V₁
    count_sd: float
    count_moe95: float
    share_moe95: float


@dataclass(frozen=True)
class LocalPlan:
    """Local beside central for one question: the chosen protocol, the others, the ratio."""

    respondents: int
    categories: int
    epsilon: Fraction
    chosen: ProtocolAccuracy
    protocols: tuple[ProtocolAccuracy, ...]
    central_sd: float
    central_moe95: int
    target: float | None = None

    @property
    def central_share_moe95(self) -> float:
        return self.central_moe95 / self.respondents

    @property
    def sd_ratio(self) -> float:
        """Local SD of a count over the central one at the same ε."""
        return self.chosen.count_sd / self.central_sd

    @property
    def moe_ratio(self) -> float:
        return self.chosen.count_moe95 / self.central_moe95

    @property
    def respondents_for_target(self) -> int | None:
        """Respondents the chosen protocol needs for a share's margin of `target`."""
        if self.target is None:
            return None
        return math.ceil(self.chosen.per_respondent_variance * (Z95 / self.target) ** 2)

    def lines(self) -> list[str]:
        """The plan in words, one fact a line."""
        eps = f"{float(self.epsilon):g}"
        chosen = self.chosen
        out = [
            f"{self.respondents:,} respondents, {self.categories} answers, ε = {eps}: "
            f"{chosen.mechanism} (k-RR when k < 3e^ε + 2 = {3 * math.exp(self.epsilon) + 2:.3g})",
            f"local:   a count ± {chosen.count_moe95:,.0f} (SD {chosen.count_sd:,.1f}), a share "
            f"± {chosen.share_moe95:.4f}",
            f"central: a count ± {self.central_moe95:,} (SD {self.central_sd:.2f}), a share ± "
            f"{self.central_share_moe95:.6f}",
            f"local/central: {self.sd_ratio:,.0f}x the SD, {self.moe_ratio:,.0f}x the margin",
        ]
        others = [p for p in self.protocols if p.mechanism != chosen.mechanism]
        out.append(
            "other protocols: "
            + "; ".join(f"{p.mechanism} share ± {p.share_moe95:.4f}" for p in others)
        )
        needed = self.respondents_for_target
        if needed is not None:
            out.append(f"a share ± {self.target:g} needs {needed:,} respondents under local DP")
        return out


def protocol_accuracy(
    mechanism: Mechanism, respondents: int, categories: int, epsilon: Fraction
) -> ProtocolAccuracy:
    """The worst-case accuracy of one protocol (OLH with its default g)."""
    domain = list(range(categories))
    law = law_of(make_randomizer(domain, epsilon, mechanism))
    v1 = max(law.p * (1 - law.p), law.q * (1 - law.q)) / law.gap**2
    sd = math.sqrt(respondents * v1)
    return ProtocolAccuracy(mechanism, v1, sd, Z95 * sd, Z95 * sd / respondents)


def plan_local(
    respondents: int,
    categories: int,
    epsilon: Fraction,
    mechanism: Mechanism | None = None,
    *,
    compact: bool = False,
    target: float | None = None,
) -> LocalPlan:
    """Local beside central at ε (see the module docstring); no data is read."""
    chosen = make_randomizer(list(range(categories)), epsilon, mechanism, compact=compact)
    protocols = tuple(protocol_accuracy(m, respondents, categories, epsilon) for m in MECHANISMS)
    central_sd, central_moe = central_count_accuracy(epsilon)
    return LocalPlan(
        respondents,
        categories,
        epsilon,
        next(p for p in protocols if p.mechanism == chosen.mechanism),
        protocols,
        central_sd,
        central_moe,
        target,
    )
