"""The budget a profile implies, and the tables that justify it to an ethics board.

`choose_budget_for` takes the profiles (and the companion selector's ε, if configured) to ε_min,
optionally rounded down to a grid, with the adversaries it protects against and what households
of k people get (group privacy); `cap_from_profile` turns it into the exact cap a ledger scope
may have, rounded down so float error can never raise a cap above what the profile allows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

from dprelease.budget._profiles import (
    OddsRiskProfile,
    Profiles,
    as_profile_list,
    epsilon_for_bound,
    epsilon_min,
    odds_factor,
)
from dprelease.budget._zcdp import delta_problem, log_odds_bound, rho_for_log_bound
from dprelease.change import ProtectedChange
from dprelease.errors import ConfigError, ProfileError
from dprelease.loss import Measure

GROUP_SIZES = (1, 2, 3, 4, 5)


def as_decimal(step: float | str | Decimal) -> Decimal:
    """The decimal a user wrote: a float is read by its shortest repr (0.05, not 0.05000…03)."""
    try:
        exact = Decimal(repr(step)) if isinstance(step, float) else Decimal(step)
    except InvalidOperation:
        exact = Decimal("NaN")
    if not exact.is_finite():
        raise ConfigError("rounding", f"the rounding step must be a finite number, got {step}")
    return exact


def round_down(epsilon: float, step: float | str | Decimal) -> float:
    """The largest multiple of `step` that is ≤ `epsilon` as a float, never above it.

    `step` is read as the decimal the user wrote (0.05, not its binary neighbour) and the grid is
    walked in exact rationals, so float artefacts like 3 × 0.1 = 0.30000000000000004 cannot round
    an ε up past what the profile allows.
    """
    exact_step = Fraction(as_decimal(step))
    if not (exact_step > 0 and math.isfinite(epsilon) and epsilon >= 0):
        raise ConfigError("rounding", f"need a step > 0 and a finite ε ≥ 0, got {step}, {epsilon}")
    multiples = math.floor(Fraction(epsilon) / exact_step)
    if float((multiples + 1) * exact_step) <= epsilon:  # the grid value is ε itself as a float
        multiples += 1
    return float(multiples * exact_step)


def _rounded_down(
    budget: float, rounding: float | str | Decimal | None, symbol: str
) -> tuple[float, str | None]:
    """The budget (ε or ρ, named by `symbol`) rounded down to a multiple of `rounding`, and the
    step as the user wrote it (None: not rounded), for ε and ρ alike. ConfigError when rounding
    leaves 0: a budget that allows no release is refused where the step that caused it is."""
    if rounding is None:
        return budget, None
    rounded, step = round_down(budget, rounding), str(as_decimal(rounding))
    if rounded <= 0:
        raise ConfigError(
            "rounding",
            f"rounding down {symbol} = {budget:.6g} to a multiple of {step} gives 0; use a "
            "smaller step or leave rounding out",
        )
    return rounded, step


def prior_odds_ratio(q: float, q0: float) -> float:
    """P10 = (q / (1 − q)) · ((1 − q0) / q0): prior odds of Y ∈ S in the data over out of it."""
    return (q / (1 - q)) * ((1 - q0) / q0)


@dataclass(frozen=True)
class Adversary:
    """A named adversary by its priors q = P[Y∈S | in data] and q0 = P[Y∈S | not in data]."""

    name: str
    q: float
    q0: float

    def __post_init__(self) -> None:
        for field, value in (("q", self.q), ("q0", self.q0)):
            if not (math.isfinite(value) and 0 < value < 1):
                raise ConfigError(
                    field,
                    f"{field} = {value} is not a probability strictly between 0 and 1; "
                    "at 0 or 1 the prior odds ratio is 0 or infinite",
                )

    @property
    def p10(self) -> float:
        return prior_odds_ratio(self.q, self.q0)


@dataclass(frozen=True)
class AdversaryRow:
    """What the profile allows one adversary and what the chosen ε actually lets it reach."""

    name: str
    q: float
    q0: float
    p10: float
    bound: float
    epsilon: float
    max_posterior_odds_ratio: float  # under zCDP: with probability ≥ 1 − δ
    rho: float | None = None  # under zCDP: the largest ρ B(P10) allows


@dataclass(frozen=True)
class GroupPrivacyRow:
    """A household of k people is protected at kε (Dwork & Roth, Thm 2.2); under zCDP at k²ρ
    (Bun & Steinke 2016), its odds factor then holding with probability ≥ 1 − δ."""

    k: int
    epsilon: float
    odds_factor: float
    rho: float | None = None


@dataclass(frozen=True)
class Zcdp:
    """A zCDP budget: δ (the probability that the odds statement may fail), ρ_max from the
    profile, and the ρ used (ρ_max, rounded down if the profile asks)."""

    delta: float
    rho_max: float
    rho: float

    def odds_factor(self, rho: float, change: ProtectedChange) -> float:
        """The factor on the posterior odds ratio that ρ keeps with probability ≥ 1 − δ."""
        return math.exp(log_odds_bound(rho, self.delta, change))


def adversary_rows(
    profiles: Profiles,
    adversaries: Sequence[Adversary],
    epsilon: float,
    neighbours: ProtectedChange = ProtectedChange.ADD_REMOVE,
    zcdp: Zcdp | None = None,
) -> list[AdversaryRow]:
    """Per adversary: B(P10) (the strictest profile's), ε_P10, and the odds ratio ε allows;
    under zCDP also ρ_P10 and the odds ratio ρ allows with probability ≥ 1 − δ."""
    listed = as_profile_list(profiles)
    rows = []
    for adversary in adversaries:
        p10 = adversary.p10
        bound = min(float(profile.bound(p10)) for profile in listed)
        factor = odds_factor(neighbours, epsilon)
        rho = None
        if zcdp is not None:
            factor = zcdp.odds_factor(zcdp.rho, neighbours)
            rho = rho_for_log_bound(math.log(bound), zcdp.delta, neighbours)
        rows.append(
            AdversaryRow(
                name=adversary.name,
                q=adversary.q,
                q0=adversary.q0,
                p10=p10,
                bound=bound,
                epsilon=float(epsilon_for_bound(neighbours, bound)),
                max_posterior_odds_ratio=factor * p10,
                rho=rho,
            )
        )
    return rows


def group_privacy(
    epsilon: float,
    neighbours: ProtectedChange = ProtectedChange.ADD_REMOVE,
    sizes: Sequence[int] = GROUP_SIZES,
    zcdp: Zcdp | None = None,
) -> list[GroupPrivacyRow]:
    """kε and its odds factor for groups of k people who may all be in the data; under zCDP
    k²ρ and the odds factor it keeps with probability ≥ 1 − δ (`epsilon` is then that
    factor's log: the group's ε_δ)."""
    if zcdp is None:
        return [
            GroupPrivacyRow(k, k * epsilon, odds_factor(neighbours, k * epsilon)) for k in sizes
        ]
    rows = []
    for k in sizes:
        rho = k * k * zcdp.rho
        bound = log_odds_bound(rho, zcdp.delta, neighbours)
        rows.append(GroupPrivacyRow(k, bound, math.exp(bound), rho))
    return rows


@dataclass(frozen=True)
class BudgetChoice:
    """Everything a steward needs to justify the ε a release uses."""

    epsilon_min: float
    epsilon: float
    argmin_p10: float
    bound_at_argmin: float
    argmin_attained: bool
    profile_index: int
    neighbours: ProtectedChange
    rounding: str | None
    adversaries: tuple[AdversaryRow, ...]
    group_privacy: tuple[GroupPrivacyRow, ...]
    profiles: tuple[OddsRiskProfile, ...]
    prior_risk_epsilon: float | None = None
    zcdp: Zcdp | None = None  # a zCDP budget (then `rounding` applies to ρ, not ε)
    cap_in_force: Fraction | None = None  # a ledger scope's cap (ε, or ρ): the tables are at it

    @property
    def measure(self) -> Measure:
        """How this budget composes: ε (pure) or ρ (zCDP)."""
        return Measure.PURE if self.zcdp is None else Measure.ZCDP

    def at_cap(self, cap: Fraction) -> BudgetChoice:
        """This choice beside the cap in force (ε, or ρ under zCDP), e.g. a ledger scope's, which
        `dprelease ledger set-cap` may have set below what the profile allows (or which a
        profile made stricter since has left above it). Everything the scope releases together
        is bounded by that cap, so the adversary and household tables are recomputed at it; the
        profile's own ε (or ρ) stays, to be shown beside it."""
        adversaries = [Adversary(row.name, row.q, row.q0) for row in self.adversaries]
        if self.zcdp is None:
            rows = adversary_rows(self.profiles, adversaries, float(cap), self.neighbours)
            groups = group_privacy(float(cap), self.neighbours)
        else:
            at = replace(self.zcdp, rho=float(cap))
            rows = adversary_rows(self.profiles, adversaries, self.epsilon, self.neighbours, at)
            groups = group_privacy(self.epsilon, self.neighbours, zcdp=at)
        return replace(self, adversaries=tuple(rows), group_privacy=tuple(groups), cap_in_force=cap)

    def to_json_dict(self) -> dict[str, Any]:
        """Plain JSON types only; the CLI's `--json` output and release manifests use it."""
        return {  # under zCDP, the ρ budget beside ε_min
            "epsilon_min": self.epsilon_min,
            "epsilon": self.epsilon,
            "measure": self.measure.value,
            "delta": None if self.zcdp is None else self.zcdp.delta,
            "rho_max": None if self.zcdp is None else self.zcdp.rho_max,
            "rho": None if self.zcdp is None else self.zcdp.rho,
            "argmin_p10": self.argmin_p10,
            "bound_at_argmin": self.bound_at_argmin,
            "argmin_attained": self.argmin_attained,
            "profile_index": self.profile_index,
            "neighbours": self.neighbours.value,
            "rounding": self.rounding,
            "adversaries": [vars(row).copy() for row in self.adversaries],
            "group_privacy": [vars(row).copy() for row in self.group_privacy],
            "profiles": [profile.describe() for profile in self.profiles],
            "prior_risk_epsilon": self.prior_risk_epsilon,
            "cap_in_force": None if self.cap_in_force is None else float(self.cap_in_force),
        }


def choose_budget_for(
    profiles: Profiles,
    *,
    neighbours: ProtectedChange = ProtectedChange.ADD_REMOVE,
    adversaries: Sequence[Adversary] = (),
    rounding: float | str | Decimal | None = None,
    prior_risk_epsilon: float | None = None,
    measure: Measure = Measure.PURE,
    delta: float | None = None,
) -> BudgetChoice:
    """ε_min over all profiles, rounded down if asked, with the tables that explain it.

    `prior_risk_epsilon` (the companion posterior-to-prior selector), when configured, must hold
    too: `epsilon` is then the smaller of the two before rounding, and `epsilon_min` stays the
    odds profile's own minimum so both are visible.

    Under `measure` zCDP (with `delta`), the budget is ρ_max, the largest ρ whose odds statement
    holds with probability ≥ 1 − δ for every P10 (`budget._zcdp`), rounded down if asked; the
    companion selector is stated for pure ε-DP only, so it is refused there.
    """
    if measure is Measure.ZCDP:
        return _zcdp_choice(profiles, neighbours, adversaries, rounding, prior_risk_epsilon, delta)
    if delta is not None:
        raise ConfigError("delta", "δ belongs to measure: zcdp; a pure ε budget has no δ")
    listed = as_profile_list(profiles)
    lowest = epsilon_min(listed, neighbours)
    if lowest.epsilon <= 0:
        raise ProfileError(
            f"profiles[{lowest.profile_index}]" if len(listed) > 1 else "profile",
            f"B = 1 at P10 = {lowest.p10:g} allows no change in the odds at all, so ε_min = 0 "
            "and nothing can be released; raise B above 1 there",
        )
    binding = (
        lowest.epsilon if prior_risk_epsilon is None else min(lowest.epsilon, prior_risk_epsilon)
    )
    epsilon, rounding_text = _rounded_down(binding, rounding, "ε")
    return BudgetChoice(
        epsilon_min=lowest.epsilon,
        epsilon=epsilon,
        argmin_p10=lowest.p10,
        bound_at_argmin=lowest.bound,
        argmin_attained=lowest.attained,
        profile_index=lowest.profile_index,
        neighbours=neighbours,
        rounding=rounding_text,
        adversaries=tuple(adversary_rows(listed, adversaries, epsilon, neighbours)),
        group_privacy=tuple(group_privacy(epsilon, neighbours)),
        profiles=tuple(listed),
        prior_risk_epsilon=prior_risk_epsilon,
    )


def _zcdp_choice(
    profiles: Profiles,
    neighbours: ProtectedChange,
    adversaries: Sequence[Adversary],
    rounding: float | str | Decimal | None,
    prior_risk_epsilon: float | None,
    delta: float | None,
) -> BudgetChoice:
    if delta is None:
        raise ConfigError("delta", "measure: zcdp needs delta, the probability that the odds "
                          "statement may fail (e.g. 1e-9)")  # fmt: skip
    if (problem := delta_problem(delta)) is not None:
        raise ConfigError("delta", problem)
    if prior_risk_epsilon is not None:
        raise ConfigError(
            "prior_risk",
            "the posterior-to-prior selector is stated for pure ε-DP; leave it out of a zcdp "
            "profile (or use measure: pure)",
        )
    pure = choose_budget_for(profiles, neighbours=neighbours, adversaries=adversaries)
    rho_max = rho_for_log_bound(math.log(pure.bound_at_argmin), delta, neighbours)
    rho, rounding_text = _rounded_down(rho_max, rounding, "ρ")
    zcdp = Zcdp(delta, rho_max, rho)
    listed = as_profile_list(profiles)
    return replace(
        pure,
        rounding=rounding_text,
        adversaries=tuple(adversary_rows(listed, adversaries, pure.epsilon, neighbours, zcdp)),
        group_privacy=tuple(group_privacy(pure.epsilon, neighbours, zcdp=zcdp)),
        zcdp=zcdp,
    )


#: A profile's ε is a float computed through logarithms (and square roots for the companion
#: selector); 2^-40 ≈ 9.1e-13 is far above that computation's error, so a value at least this far
#: below the float lies below the true ε.
PROFILE_EPSILON_MARGIN = Fraction(1, 2**40)
#: Caps from a profile without a rounding step are multiples of this.
CAP_RESOLUTION = Fraction(1, 10**12)


def cap_from_profile(choice: BudgetChoice) -> Fraction:
    """The exact budget cap a profile allows, rounded DOWN, never up.

    ε from a profile is a float that can exceed the true ε_min by an ulp, and the decimal it
    prints as can exceed it too. The cap is the largest multiple of the profile's rounding step
    (else of 10^-12) at least `PROFILE_EPSILON_MARGIN` below the float, so 0.30 with
    `rounding: 0.05` stays exactly 3/10 and ½·ln 2 becomes 0.346573590279.

    Under zCDP the cap is ρ, rounded down the same way from ρ_max (or the rounded ρ).
    """
    if choice.zcdp is not None:
        return _cap(choice.zcdp.rho_max, choice.rounding, "ρ")
    binding = choice.epsilon_min
    if choice.prior_risk_epsilon is not None:
        binding = min(binding, choice.prior_risk_epsilon)
    return _cap(binding, choice.rounding, "ε")


def _cap(value: float, rounding: str | None, symbol: str) -> Fraction:
    step = CAP_RESOLUTION if rounding is None else Fraction(as_decimal(rounding))
    cap = math.floor((Fraction(value) - PROFILE_EPSILON_MARGIN) / step) * step
    if cap <= 0:
        raise ConfigError(
            "rounding" if rounding is not None else "profile",
            f"{symbol} = {value:.3g} from the profile rounds down to a cap of 0 at a resolution "
            f"of {float(step):g}; use a smaller rounding step or a profile that allows more",
        )
    return cap
