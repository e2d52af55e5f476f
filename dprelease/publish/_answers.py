"""The budget of a release of randomized answers (`kind: randomized`, docs/local.md): nothing,
in the scope its waves were charged to, under a wave's terms."""

from __future__ import annotations

from fractions import Fraction

from dprelease.change import PrivacyUnit, ProtectedChange
from dprelease.errors import ConfigError, UnknownScope, WaveNotRecorded
from dprelease.ledger import Ledger, ScopeTerms, terms_conflict
from dprelease.loss import Measure, PrivacyLoss
from dprelease.publish._options import Budget, Options

#: What a scope of local-DP waves keeps for life (`dprelease.local`'s waves are charged under
#: these terms): pure ε composed sequentially, each report (one row) a unit, `answer` neighbours.
ANSWER_TERMS = ScopeTerms(
    "sequential", Measure.PURE, None, ProtectedChange.ANSWER, PrivacyUnit(None), None
)


def answers_budget(
    name: str,
    ledger: Ledger | None,
    new_ledger: bool,
    epsilon: Fraction | None,
    rho: Fraction | None,
    options: Options,
) -> Budget:
    """The budget of a release of randomized answers: nothing, in the scope its waves were
    charged to (which must exist in the ledger, with a wave's terms: a central scope is
    refused, NeighboursMismatch). The waves themselves are checked when it is recorded
    (`Allocation.prerequisites`)."""
    if epsilon is not None or rho is not None:
        option = options.epsilon if epsilon is not None else options.rho
        raise ConfigError(
            options.path(option),
            "a release of randomized answers spends nothing (each wave's ε was charged when "
            f"its answers were given); remove {option}",
        )
    unrecorded = WaveNotRecorded(
        f"budget scope {name!r} does not exist, so no wave of this release is recorded: record "
        "the wave first (`dprelease local wave`, dp.local.record_wave), which charges its ε "
        "there; name the wave's scope (publish.scope, --scope)"
    )
    if new_ledger:
        raise unrecorded
    existing = None
    if ledger is not None:
        try:
            existing = ledger.status(name)[0]
        except UnknownScope:
            raise unrecorded from None
        if conflict := terms_conflict(name, existing.terms, ANSWER_TERMS):
            raise conflict
    return Budget(
        loss=PrivacyLoss(Measure.PURE, Fraction(0)),
        change=ProtectedChange.ANSWER,
        scope=name,
        composition="sequential",
        cap=None if existing is None else existing.cap,
        profile_cap=None,
        new_scope=False,
        unit=PrivacyUnit(None),
    )
