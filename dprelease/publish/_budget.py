"""The budget of one release, decided once for every interface.

The command line, the Python API, the Dagster assets and the planner all ask the same question —
how much may this release of this spec spend, against which scope, under which protected change,
and may the scope be opened? — and get the same answer from `decide_budget`. They only parse
their inputs before and print its answer after.

The rules, in order:
- the scope is the one named, else the spec file's `publish.scope`, else the spec's name;
- its privacy profile (the scope's `scopes:` entry, else `privacy:`) gives the most a cap may be;
- the protected change is the spec's, else the profile's, else add/remove (they must agree);
- the cap in force is the ledger's for an existing scope (the ledger is the one source of truth:
  `dprelease ledger set-cap` changes it), else the cap a new scope gets — the stated cap, else
  the profile's; a new scope needs one of the two, and may be refused outright (production);
- the release's ε is the one stated, else the spec file's `publish.share` (default: all) of the
  cap in force.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from dprelease.budget import BudgetChoice, PrivacyProfiles, cap_from_profile, choose_budget
from dprelease.change import ProtectedChange, choose_change
from dprelease.errors import ConfigError, SpecError, UnknownScope
from dprelease.ledger import Composition, Ledger
from dprelease.loss import PrivacyLoss
from dprelease.spec import ResolvedSpec


@dataclass(frozen=True)
class Options:
    """How a face names the inputs `decide_budget` reads, so its errors say what to change in
    that face's own words (Python keywords by default)."""

    epsilon: str = "epsilon="
    cap: str = "cap="
    privacy: str = "privacy="

    def path(self, name: str) -> str:
        """The error's field: the option's name without a keyword's `=`."""
        return name.removesuffix("=")


@dataclass(frozen=True)
class Budget:
    """What one release may spend, and against which scope.

    `loss` is None only when nothing states it (no ε, no cap, no profile): a plan may still
    look for the smallest ε that meets its targets, a release refuses."""

    loss: PrivacyLoss | None
    change: ProtectedChange
    scope: str
    composition: Composition
    cap: Fraction | None  # the scope's cap in force (for a new scope: the one it will get)
    profile_cap: Fraction | None  # the most the scope's privacy profile allows
    new_scope: bool  # the ledger has no such scope yet: recording creates it with `cap`
    stated_cap_ignored: Fraction | None = None  # a stated cap the existing scope does not have
    choice: BudgetChoice | None = None  # the profile's choice, to explain it

    def required_loss(self) -> PrivacyLoss:
        """The release's loss; ConfigError when nothing stated one (`decide_budget` with
        `require_loss` refuses such a budget first, in the caller's words)."""
        if self.loss is None:
            raise ConfigError("epsilon", "give ε, or a privacy configuration that sets a cap")
        return self.loss


def composition_of(resolved: ResolvedSpec) -> Composition:
    """How the spec's periods compose (sequential when it has none): its scope must agree."""
    period = resolved.spec.period
    return "sequential" if period is None else period.composition


def decide_budget(
    resolved: ResolvedSpec,
    *,
    scope: str | None = None,
    privacy: PrivacyProfiles | None = None,
    ledger: Ledger | None = None,
    new_ledger: bool = False,
    epsilon: Fraction | None = None,
    cap: Fraction | None = None,
    may_open_scope: bool = True,
    require_loss: bool = True,
    options: Options = Options(),
) -> Budget:
    """The budget of a release of `resolved` (see the module docstring for the rules).

    `ledger` is the ledger the release will be recorded in; `new_ledger` says the release will
    be recorded in a ledger that does not exist yet (every scope is new; it is created only once
    the release has passed every check); neither: the release is not recorded. `cap` is a stated
    cap for a new scope; `may_open_scope=False` refuses an unknown scope (UnknownScope) instead
    of creating it; `require_loss=False` lets a plan look for the ε its targets need when
    nothing states one. Errors name the inputs as `options` does. Reads nothing but the
    ledger's scope.
    """
    spec = resolved.spec
    name = scope or (resolved.publish.scope if resolved.publish else None) or spec.name
    choice = profile_cap = None
    if privacy is not None:
        choice = choose_budget(privacy.for_scope(name))
        profile_cap = cap_from_profile(choice)
        if cap is not None and cap > profile_cap:
            raise ConfigError(
                options.path(options.cap),
                f"{float(cap):g} exceeds the ε the privacy profile allows ({float(profile_cap):g})",
            )
    try:
        change = choose_change(spec.neighbours, choice.neighbours if choice else None)
    except ValueError as exc:
        raise SpecError("release.neighbours", str(exc)) from None
    in_ledger = _ledger_cap(ledger, name, may_open_scope)
    new_scope = (ledger is not None or new_ledger) and in_ledger is None
    if new_ledger and not may_open_scope:
        raise UnknownScope(f"unknown budget scope {name!r}: the ledger does not exist yet")
    in_force = in_ledger if in_ledger is not None else cap or profile_cap
    if new_scope and in_force is None:
        raise ConfigError(
            options.path(options.cap),
            f"budget scope {name!r} is new: give {options.cap} or {options.privacy} to set its "
            "lifetime cap",
        )
    share = resolved.publish.share if resolved.publish else Fraction(1)
    amount = epsilon if epsilon is not None else None if in_force is None else in_force * share
    if amount is None and require_loss:
        raise ConfigError(
            options.path(options.epsilon),
            f"give {options.epsilon} or {options.privacy} (its profile sets a cap)",
        )
    return Budget(
        loss=None if amount is None else PrivacyLoss.pure(amount),
        change=change,
        scope=name,
        composition=composition_of(resolved),
        cap=in_force,
        profile_cap=profile_cap,
        new_scope=new_scope,
        stated_cap_ignored=cap if in_ledger is not None and cap not in (None, in_ledger) else None,
        choice=choice,
    )


def _ledger_cap(ledger: Ledger | None, scope: str, may_open_scope: bool) -> Fraction | None:
    """The scope's cap in the ledger, None if the scope (or the ledger) does not exist;
    UnknownScope for a missing scope that may not be opened."""
    if ledger is None:
        return None
    try:
        return ledger.status(scope)[0].cap
    except UnknownScope:
        if not may_open_scope:
            raise
        return None
