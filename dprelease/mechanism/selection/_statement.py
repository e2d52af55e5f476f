"""What a key selection says about itself: the manifest entry and the planner's report.

Both are made from the plan alone (no data): the mechanism, its share of the loss, δ, τ, the
keys-per-unit bound, and that the released key set is itself a DP output. The entry says nothing
about keys that were not selected (not how many there were, nor that any were near τ): the only
data-dependent fact a release shows is which keys it released.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from dprelease.loss import Measure, amount_text
from dprelease.mechanism.selection._plan import TABLE_COUNTS, Rule, SelectionPlan

#: The manifest's sentence on what the released keys are.
KEYS_ARE_DP = (
    "the released keys are themselves a DP output: a key appears only where a noisy count of the "
    "distinct units holding it passed the threshold; keys that were not selected are not shown "
    "and nothing is said about them"
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SelectionEntry(_Model):
    """The manifest entry of one selected key domain."""

    columns: list[str]
    mechanism: Literal["optimal", "laplace_threshold", "gaussian_threshold"]
    rule_chosen_by: Literal["spec", "auto"] = Field(
        default="auto",
        description="spec: the spec named the rule (`rule:`); auto: the plan chose it",
    )
    rule_reason: str | None = Field(
        default=None, description="why this rule: the spec's `rule:`, or the plan's reason"
    )
    policy: Literal["per_key", "weighted"]
    measure: Literal["pure", "zcdp"] = "pure"  # a pure manifest (format 2) leaves it out
    epsilon: float | None = Field(description="the selection's share of ε (pure scopes)")
    rho: float | None = Field(default=None, description="the selection's share of ρ (zCDP)")
    share_exact: str = Field(description="its share of ε (or ρ) as an exact rational")
    delta_spent: float = Field(
        description="δ spent (per release): the selection is (ε, δ)-DP. For the optimal rule and "
        "the Laplace and zCDP Gaussian threshold rules, δ bounds the probability that any key "
        "held by one unit alone is released; for the pure-scope Gaussian threshold, δ ≥ the "
        "maximum over ℓ (how many of a unit's keys are lone) of δ₁(m − ℓ) + ℓ·P(Z ≥ τ − w), which "
        "is ≤ delta_shared_keys + delta_lone_keys"
    )
    delta_spent_exact: str = Field(description="δ spent as the exact rational the ledger charges")
    delta_shared_keys: float | None = Field(
        default=None,
        description="pure-scope Gaussian threshold: δ₁(m), the proved tail of the privacy loss "
        "on keys both neighbours hold when all of a unit's keys are shared (m = G, or 2G under "
        "substitution; not about lone keys; None for the other rules)",
    )
    delta_lone_keys: float | None = Field(
        default=None,
        description="pure-scope Gaussian threshold: δ₂ = G·P(Z ≥ τ − w), the proved bound on "
        "the probability that any key held by one unit alone is released (None for the other "
        "rules). Both parts are worst cases of their own: δ spent bounds the maximum over "
        "splits of a unit's keys, so it may be below their sum",
    )
    tau: int = Field(description="units (each holding one key) from which a key is kept with "
                     "probability ≥ 1/2")  # fmt: skip
    tau_at_max_keys: int = Field(description="the same for units holding max_keys_per_unit keys")
    threshold: int | None = Field(description="τ on the integer weight (threshold rules)")
    noise: str | None = Field(description="the noise law and its exact parameter (threshold "
                              "rules)")  # fmt: skip
    weights: list[int] = Field(description="w_g: the weight a unit holding g keys gives each")
    max_keys_per_unit: int
    always_released: int = Field(description="public keys released whatever the data")
    keys: str = KEYS_ARE_DP


def selection_entry(plan: SelectionPlan, columns: list[str], always: int = 0) -> SelectionEntry:
    """The manifest entry of `plan` for the group-by `columns` (`always`: public keys listed)."""
    noise = None
    if plan.scale is not None:
        law = "discrete Laplace, scale" if plan.rule is Rule.LAPLACE else "discrete Gaussian, σ²"
        noise = f"{law} {plan.scale}"
    pure = plan.loss.measure is Measure.PURE
    shared = lone = None  # δ₁(m) and δ₂: the pure-scope Gaussian's (its plan sets both)
    if plan.noise_delta is not None and plan.lone_delta is not None:
        shared, lone = float(plan.noise_delta), float(plan.lone_delta)
    return SelectionEntry(
        columns=columns,
        mechanism=plan.rule.value,
        rule_chosen_by="spec" if plan.auto_reason is None else "auto",
        rule_reason=plan.auto_reason or f"named in the spec (rule: {plan.rule.value})",
        policy=plan.policy.value,
        measure=plan.loss.measure.value,
        epsilon=float(plan.loss.amount) if pure else None,
        rho=None if pure else float(plan.loss.amount),
        share_exact=str(plan.loss.amount),
        delta_spent=float(plan.delta),
        delta_spent_exact=str(plan.delta),
        delta_shared_keys=shared,
        delta_lone_keys=lone,
        tau=plan.tau(1),
        tau_at_max_keys=plan.tau(plan.max_keys_per_unit),
        threshold=plan.threshold,
        noise=noise,
        weights=list(plan.weights),
        max_keys_per_unit=plan.max_keys_per_unit,
        always_released=always,
    )


class KeepRow(_Model):
    units: int
    probability: float = Field(description="held by this many units, each holding one key")
    probability_at_max_keys: float = Field(description="the same, units holding G keys")


class SelectionReport(_Model):
    """The planner's view of a selection, without data."""

    entry: SelectionEntry
    keep: list[KeepRow]
    scope_delta: float
    delta_spent_before: float
    delta_left: float = Field(description="what stays of the scope's δ after this release")


def plan_report(
    plan: SelectionPlan,
    columns: list[str],
    scope_delta: Fraction,
    spent: Fraction = Fraction(0),
    always: int = 0,
) -> SelectionReport:
    """τ, the keep probabilities for n in TABLE_COUNTS, the δ spent and what stays of the scope's
    δ budget `scope_delta` (of which `spent` is spent already). ValueError, saying what to
    change, when this selection's δ does not fit."""
    left = scope_delta - spent - plan.delta
    if left < 0:
        raise ValueError(
            f"key selection spends δ = {amount_text(plan.delta)}, and the scope has "
            f"{amount_text(max(scope_delta - spent, Fraction(0)))} of its δ = "
            f"{amount_text(scope_delta)} left: spend a smaller δ per release"
        )
    counts = np.array(TABLE_COUNTS)
    one = plan.keep_probability(counts, 1)
    most = plan.keep_probability(counts, plan.max_keys_per_unit)
    rows = [
        KeepRow(units=n, probability=float(a), probability_at_max_keys=float(b))
        for n, a, b in zip(TABLE_COUNTS, one, most, strict=True)
    ]
    return SelectionReport(
        entry=selection_entry(plan, columns, always),
        keep=rows,
        scope_delta=float(scope_delta),
        delta_spent_before=float(spent),
        delta_left=float(left),
    )


def missing_delta(scope: str | None = None) -> str:
    """The one-line refusal of selection in a scope (or a release) that has no δ budget for it:
    `selection_delta`, a budget of its own, never the δ a zCDP scope's ρ is read at (review
    S1: reusing that one would understate the odds statement's failure probability)."""
    where = "this release" if scope is None else f"scope {scope!r}"
    return (
        "select: true spends δ (a key held by one unit alone is released with probability ≤ δ), "
        f"and {where} has no δ budget for it: give selection_delta (e.g. 1e-9; in a privacy "
        "profile `selection_delta:`), or list the public keys instead of selecting them"
    )
