"""Pure ε or zCDP? The same spec planned under both measures at the same odds statement.

Under pure ε-DP a scope's budget ε is split over its measurements and Laplace noise grows
linearly with their number; under ρ-zCDP the budget ρ_max (the largest ρ whose odds statement
holds with probability ≥ 1 − δ) is split instead and Gaussian noise grows with its square root.
Which is more accurate depends on how many measurements share the budget; this module answers it
for one spec, without data, with the exact margins a release would state.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from dprelease.budget import PrivacyConfig, cap_from_profile, choose_budget
from dprelease.change import ProtectedChange
from dprelease.errors import SpecError
from dprelease.loss import Measure, Mechanism, PrivacyLoss
from dprelease.spec import ResolvedSpec
from dprelease.statement._manifest import ExactRational


class StatisticComparison(BaseModel):
    """One statistic's 95% margin of error under each measure, at the same odds statement."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    pure_moe95: float | None = Field(description="Laplace at the pure ε (None: per cell)")
    zcdp_moe95: float | None = Field(description="Gaussian at the zCDP ρ (None: per cell)")
    smaller: Literal["pure", "zcdp", "equal"] | None = None


class MeasureComparison(BaseModel):
    """`dprelease plan --compare`: a release of the spec as one of `releases` equal releases of
    the scope's budget, under pure ε-DP with Laplace noise at the profile's ε and under ρ-zCDP
    with Gaussian noise at the profile's ρ_max for δ: the same odds statement (the zCDP one
    holding with probability ≥ 1 − δ), and which margins are smaller."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    delta: float
    releases: int = Field(description="equal releases sharing the scope's budget")
    epsilon_cap_exact: ExactRational = Field(description="the scope's ε under pure ε-DP")
    rho_cap_exact: ExactRational = Field(description="its ρ_max under zCDP at δ")
    epsilon_exact: ExactRational = Field(description="one release's ε")
    rho_exact: ExactRational = Field(description="one release's ρ")
    statistics: list[StatisticComparison]
    smaller: Literal["pure", "zcdp", "mixed", "equal"]


def compare_measures(
    resolved: ResolvedSpec,
    profile: PrivacyConfig,
    neighbours: ProtectedChange,
    *,
    delta: float,
    releases: int,
) -> MeasureComparison:
    """Plan the spec under both measures at the same odds profile (see `MeasureComparison`)."""
    from dprelease.statement._planner import plan  # the planner states a comparison it makes

    if releases < 1:
        raise SpecError("releases", "plan at least one release")
    caps = {
        measure: cap_from_profile(
            choose_budget(
                profile.model_copy(
                    update={
                        "measure": measure,
                        "delta": delta if measure is Measure.ZCDP else None,
                        "prior_risk": None if measure is Measure.ZCDP else profile.prior_risk,
                    }
                )
            )
        )
        for measure in Measure
    }
    share = Fraction(1, releases)
    pure = plan(resolved, PrivacyLoss.pure(caps[Measure.PURE] * share), neighbours)
    zcdp = plan(
        resolved,
        PrivacyLoss.zcdp(caps[Measure.ZCDP] * share),
        neighbours,
        mechanism=Mechanism.GAUSSIAN,
    )
    rows = []
    for a, b in zip(pure.statistics, zcdp.statistics, strict=True):
        smaller: Literal["pure", "zcdp", "equal"] | None = None
        if a.moe95 is not None and b.moe95 is not None:
            smaller = "equal" if a.moe95 == b.moe95 else "pure" if a.moe95 < b.moe95 else "zcdp"
        rows.append(
            StatisticComparison(
                name=a.name, pure_moe95=a.moe95, zcdp_moe95=b.moe95, smaller=smaller
            )
        )
    verdicts = {row.smaller for row in rows if row.smaller is not None}
    overall: Literal["pure", "zcdp", "mixed", "equal"] = (
        verdicts.pop() if len(verdicts) == 1 else "mixed" if verdicts else "equal"
    )
    return MeasureComparison(
        delta=delta,
        releases=releases,
        epsilon_cap_exact=str(caps[Measure.PURE]),
        rho_cap_exact=str(caps[Measure.ZCDP]),
        epsilon_exact=str(caps[Measure.PURE] * share),
        rho_exact=str(caps[Measure.ZCDP] * share),
        statistics=rows,
        smaller=overall,
    )
