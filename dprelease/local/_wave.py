"""Waves in the ledger: the ε of a local mechanism is spent when the answer is given.

Recording a wave charges its ε to the scope of the people asked, before any answer is collected,
through the ledger's own reserve → commit (the wave's slot is `wave:<id>/-`, which no central
release can have; the stored "release" is the wave's public declaration). Recording the same
wave again returns the stored record and charges nothing; asking the same question in another
wave is another slot, so another charge. A release computed only from a wave's randomized
answers is post-processing: it is charged nothing, and recording it checks that its wave was
recorded (`publish.check_prerequisite`).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from fractions import Fraction

import polars as pl

from dprelease.budget import PrivacyProfiles, cap_from_profile, choose_budget
from dprelease.errors import (
    BudgetExhausted,
    ConfigError,
    MeasureMismatch,
    SpecChanged,
    UnknownScope,
)
from dprelease.ledger import Ledger, ReservationStatus
from dprelease.local._spec import Wave
from dprelease.publish import ANSWER_TERMS

#: What a wave's scope keeps for life: pure ε composed sequentially, each respondent's report
#: (one row) a unit, and `answer` neighbours (one answer changes; who answered is public, as a
#: release of the wave publishes each cell's respondents). No central release states `answer`,
#: so the ledger refuses a central release into a scope of waves and a wave into a central
#: scope (NeighboursMismatch): a scope's guarantee never silently loses "who is in the data".
#: A release of the wave's answers states the same terms (`publish.ANSWER_TERMS`).
WAVE_TERMS = ANSWER_TERMS


@dataclass(frozen=True)
class RecordedWave:
    """What recording a wave did: `status` "reserved" is a new charge of ε, "committed" the
    wave as it was recorded before (nothing charged), "resumed" an open record taken over."""

    wave: Wave
    scope: str
    charge_id: int
    status: ReservationStatus
    epsilon: Fraction
    new_scope: bool
    cap: Fraction
    spent: Fraction

    @property
    def charged(self) -> bool:
        return self.status == "reserved"

    def describe(self) -> str:
        """What the ledger did, in words."""
        if self.status == "committed":
            return f"wave {self.wave.id!r} was recorded before: nothing charged"
        return (
            f"wave {self.wave.id!r} recorded: ε = {float(self.epsilon):g} charged to scope "
            f"{self.scope!r} ({float(self.spent):g} of its cap {float(self.cap):g} spent)"
        )


def _table(wave: Wave) -> bytes:
    """The wave's stored table: its public answers, by index."""
    answers = list(wave.randomizer.domain)
    frame = pl.DataFrame({"index": range(len(answers)), "answer": answers})
    buffer = io.BytesIO()
    frame.write_parquet(buffer, statistics=False)
    return buffer.getvalue()


def new_scope_cap(
    wave: Wave, cap: Fraction | None, privacy: PrivacyProfiles | None
) -> tuple[Fraction, Fraction | None]:
    """The cap the wave's scope gets if it is new (stated, else its privacy profile's) and the
    most the profile allows (None without one). Refused: neither is given (ConfigError), a
    zCDP profile (MeasureMismatch), a wave's ε above that cap (BudgetExhausted)."""
    profile_cap = None
    if privacy is not None:
        choice = choose_budget(privacy.for_scope(wave.spec.scope))
        if choice.zcdp is not None:
            raise MeasureMismatch(
                f"budget scope {wave.spec.scope!r}: its privacy profile spends ρ (zCDP), and a "
                "wave's randomizer spends ε (pure local DP); record waves in a pure-ε scope"
            )
        profile_cap = cap_from_profile(choice)
    chosen = cap if cap is not None else profile_cap
    if chosen is None:
        raise ConfigError(
            "cap",
            f"budget scope {wave.spec.scope!r} is new: give its lifetime cap (--cap, cap=) or a "
            "privacy configuration whose profile sets it",
        )
    if wave.randomizer.epsilon > chosen:  # refused before the scope (or the ledger) exists
        raise BudgetExhausted(wave.spec.scope, Fraction(0), chosen, wave.randomizer.epsilon)
    return chosen, profile_cap


def record_wave(
    wave: Wave,
    ledger: Ledger,
    *,
    cap: Fraction | None = None,
    privacy: PrivacyProfiles | None = None,
    run_id: str | None = None,
) -> RecordedWave:
    """Charge the wave's ε to its scope (creating the scope with `cap`, else its profile's cap,
    if it is new) and store its declaration; a wave recorded before is returned, uncharged.

    Refused, with the ledger unchanged: BudgetExhausted, a scope of other terms than
    `WAVE_TERMS` (a central release's scope, zCDP, parallel composition), a wave id recorded
    with other parameters (its questionnaire cannot change: a changed one is a new wave)."""
    scope, epsilon = wave.spec.scope, wave.randomizer.epsilon
    try:
        status = ledger.status(scope)[0]
    except UnknownScope:
        status = None
    profile_cap = new_cap = None
    if status is None:
        new_cap, profile_cap = new_scope_cap(wave, cap, privacy)
    elif privacy is not None:
        profile_cap = cap_from_profile(choose_budget(privacy.for_scope(scope)))
    try:
        reservation = ledger.reserve(
            wave.release_id,
            scope,
            None,
            epsilon,
            spec_hash=wave.hash,
            terms=WAVE_TERMS,
            run_id=run_id,
            max_cap=profile_cap,
            new_scope_cap=new_cap,
        )
    except SpecChanged:
        raise SpecChanged(
            f"wave {wave.id!r} was recorded with other parameters (question, answers, mechanism, "
            "ε or randomizer version); a wave's questionnaire cannot change once asked: give the "
            "changed questionnaire a new wave id (a new wave, charged again)"
        ) from None
    if reservation.status != "committed":
        ledger.commit(reservation, _table(wave), wave.declaration())
    after = ledger.status(scope)[0]
    return RecordedWave(
        wave,
        scope,
        reservation.charge_id,
        reservation.status,
        reservation.epsilon,
        new_scope=status is None,
        cap=after.cap,
        spent=after.spent,
    )
