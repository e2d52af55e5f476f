"""Pure ε or zCDP? The same spec planned under both measures at the same odds statement.

Under pure ε-DP a scope's budget ε is split over its measurements and Laplace noise grows
linearly with their number; under ρ-zCDP the budget ρ_max (the largest ρ whose odds statement
holds with probability ≥ 1 − δ) is split instead and Gaussian noise grows with its square root.
Which is more accurate depends on how many measurements share the budget; these models state the
answer for one spec, without data, with the exact margins a release would state
(`publish.plan_budget(..., compare=True)` makes it).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

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
