"""The budget of one release, decided once for every interface.

The command line, the Python API, the Dagster assets and the planner all ask the same question —
how much may this release of this spec spend, against which scope, under which protected change,
and may the scope be opened? — and get the same answer from `decide_budget`. They only parse
their inputs before and print its answer after.

The rules, in order:
- the scope is the one named, else the spec file's `publish.scope`, else the spec's name;
- its privacy profile (the scope's `scopes:` entry, else `privacy:`) gives the most a cap may be;
- the protected change is the spec's, else the profile's, else add/remove (they must agree);
- an existing scope keeps the terms of its guarantee for life (`ScopeTerms`: composition,
  measure and δ, neighbours, privacy unit, a parallel scope's period column): a release that
  states others is refused here, before anything is read or charged, and again by the ledger
  in the transaction that would charge it;
- the cap in force is the ledger's for an existing scope (the ledger is the one source of truth:
  `dprelease ledger set-cap` changes it), else the cap a new scope gets — the stated cap, else
  the profile's; a new scope needs one of the two, and may be refused outright (production);
- the release's loss is the one stated, else the spec file's `publish.share` (default: all) of
  the cap in force;
- its measure is the scope's: ε for a `pure` scope, ρ for a `zcdp` one (the ledger's for an
  existing scope, which keeps one for life, else the profile's `measure:`), with the profile's δ;
- its mechanism is the spec's `mechanism:`, else the measure's own (Laplace for ε, Gaussian for
  ρ); a Laplace release fits a zCDP scope (charged ρ), a Gaussian one never fits a pure scope.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Literal

from dprelease.budget import (
    BudgetChoice,
    PrivacyConfig,
    PrivacyProfiles,
    cap_from_profile,
    choose_budget,
)
from dprelease.change import PrivacyUnit, ProtectedChange, choose_change
from dprelease.errors import (
    ConfigError,
    MeasureMismatch,
    SpecError,
    UnknownScope,
)
from dprelease.ledger import (
    Composition,
    Ledger,
    ScopeStatus,
    ScopeTerms,
    scope_name_problem,
    terms_conflict,
)
from dprelease.loss import Measure, Mechanism, PrivacyLoss, amount_text, typed_text
from dprelease.publication import planned_publication
from dprelease.publish._answers import answers_budget
from dprelease.publish._options import Budget, Options
from dprelease.spec import ResolvedSpec
from dprelease.statement import MeasureComparison, ReleasePlan, StatisticComparison, plan

#: How the Python API names the inputs (keywords); other faces pass their own `Options`.
DEFAULT_OPTIONS = Options()


def composition_of(resolved: ResolvedSpec) -> Composition:
    """How the spec's periods compose (sequential when it has none): its scope must agree."""
    period = resolved.spec.period
    return "sequential" if period is None else period.composition


def period_column_of(resolved: ResolvedSpec) -> str | None:
    """The column whose months are a parallel spec's periods (None for any other spec): a
    parallel scope is sound for one partition of its people only."""
    period = resolved.spec.period
    return period.column if period is not None and period.composition == "parallel" else None


def decide_budget(
    resolved: ResolvedSpec,
    *,
    scope: str | None = None,
    privacy: PrivacyProfiles | None = None,
    ledger: Ledger | None = None,
    new_ledger: bool = False,
    epsilon: Fraction | None = None,
    rho: Fraction | None = None,
    cap: Fraction | None = None,
    may_open_scope: bool = True,
    require_loss: bool = True,
    options: Options = DEFAULT_OPTIONS,
    selection_delta: Fraction | None = None,
) -> Budget:
    """The budget of a release of `resolved` (see the module docstring for the rules).

    `ledger` is the ledger the release will be recorded in; `new_ledger` says the release will
    be recorded in a ledger that does not exist yet (every scope is new; it is created only once
    the release has passed every check); neither: the release is not recorded. `epsilon` (a
    pure scope) or `rho` (a zCDP scope) states the release's loss; `cap` is a stated cap for a
    new scope, in its measure's unit; `may_open_scope=False` refuses an unknown scope
    (UnknownScope) instead of creating it; `require_loss=False` lets a plan look for the ε its
    targets need when nothing states one. Errors name the inputs as `options` does. Reads
    nothing but the ledger's scope.
    """
    spec = resolved.spec
    if scope is not None and (problem := scope_name_problem(scope)) is not None:
        raise ConfigError(options.path(options.scope), problem)
    name = scope or (resolved.publish.scope if resolved.publish else None) or spec.name
    if spec.of_randomized_answers:
        return answers_budget(name, ledger, new_ledger, epsilon, rho, options)
    if epsilon is not None and rho is not None:
        raise ConfigError(options.path(options.epsilon), f"give {options.epsilon} or rho, not both")
    choice = profile_cap = profile = None
    if privacy is not None:
        profile = privacy.for_scope(name)
        choice = choose_budget(profile)
        profile_cap = cap_from_profile(choice)
    try:
        change = choose_change(spec.neighbours, choice.neighbours if choice else None)
    except ValueError as exc:
        raise SpecError("release.neighbours", str(exc)) from None
    existing = _scope_status(ledger, name, may_open_scope)
    measure, delta = _measure(existing, choice, spec.mechanism, epsilon, rho, options)
    unit = PrivacyUnit(spec.privacy_unit)
    terms = ScopeTerms(
        composition_of(resolved), measure, delta, change, unit, period_column_of(resolved)
    )
    defaulted = spec.neighbours is None and choice is None  # add/remove: nothing stated it
    if existing is not None and (
        conflict := terms_conflict(
            name,
            existing.terms,
            terms,
            default_neighbours=options.privacy if defaulted else None,
        )
    ):
        raise conflict
    if cap is not None and profile_cap is not None and cap > profile_cap:
        raise ConfigError(
            options.path(options.cap),
            f"{amount_text(cap)} exceeds the {measure.symbol} the privacy profile allows "
            f"({measure.symbol} = {amount_text(profile_cap)})",
        )
    new_scope = (ledger is not None or new_ledger) and existing is None
    if new_ledger and not may_open_scope:
        raise UnknownScope(f"unknown budget scope {name!r}: the ledger does not exist yet")
    in_force = existing.cap if existing is not None else cap or profile_cap
    if new_scope and in_force is None:
        raise ConfigError(
            options.path(options.cap),
            f"budget scope {name!r} is new: give {options.cap} or {options.privacy} to set its "
            "lifetime cap",
        )
    if new_scope and measure is Measure.ZCDP and delta is None:
        raise ConfigError(
            options.path(options.privacy),
            f"budget scope {name!r} is new and spends ρ: give {options.privacy} with its "
            "profile's delta (the probability that its odds statement may fail)",
        )
    if selection_delta is None and profile is not None and profile.selection_delta is not None:
        selection_delta = Fraction(str(profile.selection_delta))  # 1e-9 is 1/10⁹ exactly
    delta_budget = _delta_budget(ledger, existing, name, selection_delta, options)
    share = resolved.publish.share if resolved.publish else Fraction(1)
    stated = epsilon if epsilon is not None else rho
    amount = stated if stated is not None else None if in_force is None else in_force * share
    if amount is None and require_loss:
        raise ConfigError(
            options.path(options.epsilon),
            f"give {options.epsilon} or {options.privacy} (its profile sets a cap)",
        )
    if require_loss and new_scope and amount is not None and in_force and amount > in_force:
        # the ledger would refuse it too; refused here, no ledger is made for it
        option = options.epsilon if measure is Measure.PURE else options.rho
        raise ConfigError(
            options.path(option),
            f"{measure.symbol} = {amount_text(amount)} is more than the cap of the new budget "
            f"scope {name!r} ({measure.symbol} = {amount_text(in_force)}); nothing was charged "
            f"and no scope was made: release with {option}"
            f"{'' if option.endswith('=') else ' '}{typed_text(in_force)} or less",
        )
    return Budget(
        loss=None if amount is None else PrivacyLoss(measure, amount),
        change=change,
        scope=name,
        composition=terms.composition,
        cap=in_force,
        profile_cap=profile_cap,
        new_scope=new_scope,
        mechanism=_mechanism(spec.mechanism, measure),
        delta=delta,
        selection_delta=_release_delta(delta_budget, amount, in_force),
        selection_delta_budget=delta_budget,
        selection_delta_spent=Fraction(0) if existing is None else existing.selection_delta_spent,
        unit=unit,
        period_column=terms.period_column,
        stated_cap_ignored=cap
        if existing is not None and cap not in (None, existing.cap)
        else None,
        choice=choice,
        profile=profile,
    )


def plan_budget(
    resolved: ResolvedSpec,
    budget: Budget,
    *,
    targets: Mapping[str, float] | None = None,
    compare: bool = False,
    delta: float | None = None,
    releases: int | None = None,
) -> ReleasePlan:
    """What the release this budget allows will state (`statement.plan`) and what its
    rounding base and reliability rules will do (`publication.planned_publication`); with
    `compare`, also its margins under pure ε with Laplace noise and under zCDP with Gaussian
    noise at the same odds profile (δ: given, else the profile's, else 10⁻⁹), as one of
    `releases` equal releases of the scope (default: 1/`publish.share`)."""
    planned = plan(
        resolved,
        budget.loss,
        budget.change,
        targets=targets,
        mechanism=budget.mechanism,
        measure=None if budget.loss is None else budget.loss.measure,
        selection_delta=budget.selection_delta,
        selection_delta_budget=budget.selection_delta_budget,
        selection_delta_spent=budget.selection_delta_spent,
    )
    publication = planned_publication(resolved, planned)
    if publication is not None:
        planned = planned.model_copy(update={"publication": publication})
    if not compare:
        return planned
    if budget.profile is None:
        raise ConfigError("privacy", "comparing pure ε with zCDP needs the scope's privacy profile")
    share = resolved.publish.share if resolved.publish else Fraction(1)
    if releases is None and share.numerator != 1:
        raise ConfigError("releases", f"the share {share} is not 1/n: give the number of releases")
    comparison = _compare_measures(
        resolved,
        budget.profile,
        budget.change,
        delta=delta or budget.profile.delta or DEFAULT_DELTA,
        releases=releases or share.denominator,
    )
    return planned.model_copy(update={"comparison": comparison})


#: The δ a comparison reads zCDP at when neither the caller nor the profile states one.
DEFAULT_DELTA = 1e-9


def _compare_measures(
    resolved: ResolvedSpec,
    profile: PrivacyConfig,
    neighbours: ProtectedChange,
    *,
    delta: float,
    releases: int,
) -> MeasureComparison:
    """Plan the spec under both measures at the same odds profile (see `MeasureComparison`).

    A profile's `rounding` step is written in its own measure's unit: it rounds that measure's
    cap only (an ε grid of 0.05 would round a ρ of 0.0014 down to nothing), and the other
    measure's cap is the unrounded one, as a profile without a step gives."""
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
                        "rounding": profile.rounding if measure is profile.measure else None,
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


def _measure(
    existing: ScopeStatus | None,
    choice: BudgetChoice | None,
    mechanism: Mechanism | None,
    epsilon: Fraction | None,
    rho: Fraction | None,
    options: Options,
) -> tuple[Measure, float | None]:
    """The scope's measure and δ: the ledger's for an existing scope (a scope keeps one for
    life, and its profile must agree), else the profile's, else what the stated loss or the
    spec's mechanism implies."""
    profile = None if choice is None else choice.measure
    profile_delta = None if choice is None or choice.zcdp is None else choice.zcdp.delta
    if existing is not None:
        if profile is not None and profile is not existing.measure:
            raise MeasureMismatch(
                f"budget scope {existing.name!r} spends {existing.unit} ({existing.measure.value}) "
                f"in the ledger but its privacy profile says measure: {profile.value}; a scope's "
                "measure never changes: release into another scope, or fix the profile"
            )
        measure, delta = existing.measure, existing.delta
    elif profile is not None:
        measure, delta = profile, profile_delta
    elif rho is not None or (mechanism is Mechanism.GAUSSIAN and epsilon is None):
        measure, delta = Measure.ZCDP, None
    else:
        measure, delta = Measure.PURE, None
    if measure is Measure.ZCDP and epsilon is not None:
        raise ConfigError(
            options.path(options.epsilon),
            "this scope spends ρ (zCDP): state the release's loss as rho, not epsilon",
        )
    if measure is Measure.PURE and rho is not None:
        raise ConfigError(
            options.path(options.rho),
            f"this scope spends ε (pure): state {options.epsilon}, not {options.path(options.rho)}",
        )
    return measure, delta


def _mechanism(declared: Mechanism | None, measure: Measure) -> Mechanism:
    """The spec's mechanism, else the measure's own; a Gaussian release is never ε-DP."""
    if declared is Mechanism.GAUSSIAN and measure is Measure.PURE:
        raise SpecError(
            "release.mechanism",
            "the Gaussian mechanism is ρ-zCDP, not ε-DP: release it into a zcdp scope (a "
            "privacy profile with measure: zcdp and delta), or use mechanism: laplace",
        )
    if declared is not None:
        return declared
    return Mechanism.LAPLACE if measure is Measure.PURE else Mechanism.GAUSSIAN


def _delta_budget(
    ledger: Ledger | None,
    existing: ScopeStatus | None,
    scope: str,
    stated: Fraction | None,
    options: Options,
) -> Fraction | None:
    """The scope's selection δ budget: the ledger's (a stated one must agree), else `stated`."""
    kept = ledger.selection_delta(scope) if ledger is not None and existing else None
    if kept is not None and stated is not None and stated != kept:
        raise ConfigError(
            "selection_delta",
            f"budget scope {scope!r} keeps a selection δ of {amount_text(kept)} for life; leave "
            f"selection_delta out, or give {typed_text(kept)}",
        )
    return kept if kept is not None else stated


def _release_delta(
    budget: Fraction | None, amount: Fraction | None, in_force: Fraction | None
) -> Fraction | None:
    """What one release spends of the scope's selection δ: its loss's share of the cap in
    force, so the δ runs out when the cap does (the whole budget when there is no cap)."""
    if budget is None:
        return None
    if amount is None or not in_force:
        return budget
    return budget * min(amount / in_force, Fraction(1))


def _scope_status(ledger: Ledger | None, scope: str, may_open_scope: bool) -> ScopeStatus | None:
    """The scope's status in the ledger, None if the scope (or the ledger) does not exist;
    UnknownScope for a missing scope that may not be opened."""
    if ledger is None:
        return None
    try:
        return ledger.status(scope)[0]
    except UnknownScope:
        if not may_open_scope:
            raise
        return None
