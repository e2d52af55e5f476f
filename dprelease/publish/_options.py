"""What a release's budget is (`Budget`) and how a face names the inputs that decide it
(`Options`): the answer `decide_budget` gives every face."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from dprelease.budget import BudgetChoice, PrivacyConfig
from dprelease.change import PrivacyUnit, ProtectedChange
from dprelease.errors import ConfigError
from dprelease.ledger import Composition, ScopeTerms
from dprelease.loss import Mechanism, PrivacyLoss


@dataclass(frozen=True)
class Options:
    """How a face names the inputs `decide_budget` reads, so its errors say what to change in
    that face's own words (Python keywords by default)."""

    epsilon: str = "epsilon="
    rho: str = "rho="
    cap: str = "cap="
    privacy: str = "privacy="
    scope: str = "scope="

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
    mechanism: Mechanism = Mechanism.LAPLACE  # the noise the release adds
    delta: float | None = None  # zcdp: the δ the scope's odds statement is read at
    #: δ this release's key selections may spend (select: true), a budget of its own: never
    #: the δ above (PRIVACY.md: the odds statement fails with probability ≤ δ + what is spent)
    selection_delta: Fraction | None = None
    #: the scope's selection δ for life (the ledger's, else the one stated for it); a release
    #: spends the share of it that its loss is of the cap in force (all of it without a cap)
    selection_delta_budget: Fraction | None = None
    #: what the scope has spent of that budget already (the ledger's; a parallel scope's worst
    #: period), so the planner's "δ left" is the ledger's
    selection_delta_spent: Fraction = Fraction(0)
    unit: PrivacyUnit = PrivacyUnit()  # whom the release protects: the spec's privacy unit
    period_column: str | None = None  # parallel periods: the column whose months they are
    stated_cap_ignored: Fraction | None = None  # a stated cap the existing scope does not have
    choice: BudgetChoice | None = None  # the profile's choice, to explain it
    profile: PrivacyConfig | None = None  # the scope's privacy profile, if one was given

    @property
    def terms(self) -> ScopeTerms:
        """What this release's guarantee rests on, which its scope must keep (`ScopeTerms`)."""
        measure = self.required_loss().measure
        return ScopeTerms(
            self.composition, measure, self.delta, self.change, self.unit, self.period_column
        )

    def required_loss(self) -> PrivacyLoss:
        """The release's loss; ConfigError when nothing stated one (`decide_budget` with
        `require_loss` refuses such a budget first, in the caller's words)."""
        if self.loss is None:
            raise ConfigError("epsilon", "give ε, or a privacy configuration that sets a cap")
        return self.loss
