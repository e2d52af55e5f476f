"""How much privacy: the budget an agency's risk statement allows, and why.

The steward states an odds risk profile B(P10) — how much a release may multiply an adversary's
posterior odds ratio — in the `privacy:` YAML (with optional per-scope profiles under `scopes:`,
named adversaries and a companion posterior-to-prior selector). From it follow ε_min, the exact
cap a ledger scope may have (rounded down), and the tables and figures that explain the choice.
Nothing here knows about data, specs or ledgers.

    profiles = load_privacy_profiles("privacy.yaml")
    choice = choose_budget(profiles.for_scope("hospital_patients"))
    choice.epsilon, cap_from_profile(choice), write_plots(choice, directory)
"""

from dprelease.budget._choice import (
    GROUP_SIZES,
    Adversary,
    AdversaryRow,
    BudgetChoice,
    GroupPrivacyRow,
    adversary_rows,
    cap_from_profile,
    choose_budget_for,
    group_privacy,
    prior_odds_ratio,
    round_down,
)
from dprelease.budget._config import (
    PrivacyConfig,
    PrivacyProfiles,
    choose_budget,
    load_privacy_config,
    load_privacy_profiles,
)
from dprelease.budget._figures import (
    EPSILON_PNG,
    PROFILE_PNG,
    Table,
    adversary_table,
    argmin_text,
    budget_markdown,
    budget_summary,
    companion_text,
    epsilon_figure,
    group_privacy_table,
    markdown_table,
    profile_figure,
    write_plots,
)
from dprelease.budget._prior_risk import (
    ConstantRelativeRisk,
    FloorRelativeRiskFixedP,
    FloorRelativeRiskFixedQ,
    PriorRiskEpsilon,
    RelativeRiskProfile,
    theorem2_epsilon,
)
from dprelease.budget._profiles import (
    ConstantProfile,
    EpsilonMinimum,
    OddsRiskProfile,
    PiecewiseLinearProfile,
    ProfileMinimum,
    StepProfile,
    epsilon_for_bound,
    epsilon_min,
    odds_factor,
)

__all__ = [
    "EPSILON_PNG",
    "GROUP_SIZES",
    "PROFILE_PNG",
    "Adversary",
    "AdversaryRow",
    "BudgetChoice",
    "ConstantProfile",
    "ConstantRelativeRisk",
    "EpsilonMinimum",
    "FloorRelativeRiskFixedP",
    "FloorRelativeRiskFixedQ",
    "GroupPrivacyRow",
    "OddsRiskProfile",
    "PiecewiseLinearProfile",
    "PriorRiskEpsilon",
    "PrivacyConfig",
    "PrivacyProfiles",
    "ProfileMinimum",
    "RelativeRiskProfile",
    "StepProfile",
    "Table",
    "adversary_rows",
    "adversary_table",
    "argmin_text",
    "budget_markdown",
    "budget_summary",
    "cap_from_profile",
    "choose_budget",
    "choose_budget_for",
    "companion_text",
    "epsilon_figure",
    "epsilon_for_bound",
    "epsilon_min",
    "group_privacy",
    "group_privacy_table",
    "load_privacy_config",
    "load_privacy_profiles",
    "markdown_table",
    "odds_factor",
    "prior_odds_ratio",
    "profile_figure",
    "round_down",
    "theorem2_epsilon",
    "write_plots",
]
