"""Typed errors. Each says what is wrong and what to change, and names the field or column.

Messages on the release path must never contain values computed from confidential data
(row counts, data-derived minima or maxima): they name fields, columns and declared settings only.
"""

from __future__ import annotations

from fractions import Fraction

from dprelease.loss import Measure, amount_text, typed_text

#: What an `except BaseException` that stands for "whatever a library raises" lets through. Such
#: handlers are needed because a panic in a Rust extension (polars, Clarabel) is raised as a
#: `pyo3_runtime.PanicException`, which derives from BaseException, not Exception.
INTERRUPTS = (KeyboardInterrupt, SystemExit, GeneratorExit)


class DPReleaseError(Exception):
    """Base class: every error the library raises on purpose."""


class ConfigError(DPReleaseError, ValueError):
    """A configuration value is invalid.

    `path` is its location in the YAML, e.g. `privacy.profile.points[2]`.
    """

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}" if path else message)


class ProfileError(ConfigError):
    """An odds risk profile is invalid (B < 1, unsorted or non-finite points, too few points)."""


class SpecError(ConfigError):
    """A release spec is invalid (unknown column or statistic, bad bounds, bad key domain)."""


class SchemaError(DPReleaseError, ValueError):
    """The input does not fit the spec (missing column, wrong dtype).

    Names the column and, where the spec declares it, its YAML path; never a data value.
    """

    def __init__(self, column: str, message: str, path: str | None = None) -> None:
        self.column = column
        self.path = path
        where = f"{path}: " if path else ""
        super().__init__(f"{where}column {column!r}: {message}")


class InputError(DPReleaseError, ValueError):
    """The confidential input cannot be read as given: a format dprelease does not read, or a
    directory that is not a dataset. Names the input, never a value in it."""

    def __init__(self, source: str, message: str) -> None:
        self.source = source
        super().__init__(f"input {source!r}: {message}")


class DataError(DPReleaseError):
    """Reading or aggregating the confidential input failed. The engine's own message is withheld
    because it may quote confidential values; the error says where to look instead."""


class NoiseError(DPReleaseError, ValueError):
    """A noise request is invalid (scale not a positive finite number, bad size)."""


class UnsafeNoiseSourceError(DPReleaseError):
    """A seeded (test-only) noise source reached a release path that did not explicitly allow it."""


class BudgetExhausted(DPReleaseError):
    """A release would take the scope's spending past its cap; nothing was charged or written.

    The message states the numbers and what the scope's composition brings back: under
    sequential composition nothing, ever (a new period spends from the same cap); under parallel
    composition each period has its own full cap. What to do depends on who asked, so the
    message ends with `action`: by default the Python API's; the CLI and the pipeline put theirs
    with `with_action` (there the operator chooses no ε, for instance). The amounts are exact
    rationals, as the ledger keeps them, in the scope's `measure` (ε, or ρ for zCDP), each
    spelled once (`amount_text`); for a parallel scope they are those of `period`.
    """

    def __init__(
        self,
        scope: str,
        spent: Fraction,
        cap: Fraction,
        requested: Fraction,
        *,
        composition: str = "sequential",  # a ledger Composition
        period: str | None = None,
        action: str | None = None,
        measure: Measure = Measure.PURE,
    ) -> None:
        self.scope = scope
        self.measure = measure
        self.spent = spent
        self.cap = cap
        self.requested = requested
        self.remaining = max(cap - spent, Fraction(0))
        self.composition = composition
        self.period = period
        self.action = action or self._python_action()
        super().__init__(f"{self.facts()} {self.composition_text()} {self.action}")

    @property
    def option(self) -> str:
        """The keyword a smaller release is asked with: epsilon, or rho in a zCDP scope."""
        return "epsilon" if self.measure is Measure.PURE else "rho"

    def facts(self) -> str:
        where = f"scope {self.scope!r}" + (f", period {self.period}" if self.period else "")
        symbol = self.measure.symbol
        return (
            f"privacy budget exhausted for {where}: spent {symbol} = {amount_text(self.spent)} "
            f"of cap {amount_text(self.cap)}, requested {amount_text(self.requested)}, "
            f"remaining {amount_text(self.remaining)}; nothing was charged."
        )

    def composition_text(self) -> str:
        """What the scope's composition brings back (sequential: nothing, ever)."""
        if self.composition == "parallel":
            return (
                "The scope composes periods in parallel: every other period has its own full "
                f"cap of {self.measure.symbol} = {amount_text(self.cap)}."
            )
        return (
            "The scope composes sequentially: what it has spent never comes back, and a new "
            "period draws on the same cap."
        )

    def _python_action(self) -> str:
        smaller = (
            f"release with {self.option} at most {typed_text(self.remaining)}, or "
            if self.remaining
            else ""
        )
        return f"To go on, {smaller}raise the scope's cap on purpose (Ledger.set_cap)."

    def with_action(self, action: str) -> BudgetExhausted:
        """The same refusal, ending with what to do in the caller's interface."""
        return BudgetExhausted(
            self.scope,
            self.spent,
            self.cap,
            self.requested,
            composition=self.composition,
            period=self.period,
            action=action,
            measure=self.measure,
        )


class LedgerError(DPReleaseError):
    """The ledger refused or could not do what was asked; nothing was charged or published.

    The subclasses say why, so callers can tell an operator's fix (void, set-cap, a new scope)
    from an outage.
    """


class LedgerUnavailable(LedgerError):
    """The ledger database is unreachable or corrupt; the release fails closed."""


class LedgerNotFound(LedgerError):
    """A command that only reads (or changes existing scopes) found no ledger; none was created."""


class UnknownScope(LedgerError):
    """The ledger has no budget scope of this name (it is reachable: this is not an outage)."""


class CompositionMismatch(LedgerError):
    """The spec composes periods differently from the scope it would draw on."""


class MeasureMismatch(LedgerError):
    """The release spends another measure (ε or ρ), or reads zCDP at another δ, than its scope."""


class NeighboursMismatch(LedgerError):
    """The release is calibrated for other neighbours (add/remove or substitute) than its scope's
    cap was chosen for: the same ε would mean another odds factor."""


class PrivacyUnitMismatch(LedgerError):
    """The release protects another privacy unit (each row, or the rows of another column) than
    its scope: the scope's spending would bound what is revealed about no one in particular."""


class SpecChanged(LedgerError):
    """The release slot was released from another spec; re-releasing it must be asked for."""


class WaveNotRecorded(LedgerError):
    """A release of a local-DP wave's answers whose wave the ledger has no (matching) record of:
    its ε was not charged."""


class ReservationMismatch(LedgerError):
    """The slot has an open reservation for another spec or ε; void it before releasing."""


class CapAboveProfile(LedgerError):
    """The scope's cap in the ledger exceeds what the privacy profile allows; nothing is spent."""
