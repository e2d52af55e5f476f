"""What a release run tells its operator: a refusal as one message with its facts beside it,
in Dagster's words, and the library's operator channel in the run's log.

Both stay data-free or inside the boundary: a refusal's words and facts come from the spec, the
budget and the ledger (typed errors), and the operator channel's warnings go to the run log,
never to metadata.
"""

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from fractions import Fraction

import dagster as dg
from dagster._core.errors import DagsterUserCodeProcessError  # not exported: see `Refusal`
from dagster_shared.error import SerializableErrorInfo

from dprelease.errors import BudgetExhausted, DPReleaseError, LedgerNotFound, UnknownScope
from dprelease.ledger import ScopeStatus
from dprelease.loss import amount_text, loss_text, typed_text
from dprelease.operator import LOGGER_NAME
from pipelines.resources import ConfidentialTableMissing

#: After the library's words, what an operator does in Dagster about a refusal only production
#: meets (the scope is not there and the run did not ask to create it).
PRODUCTION_HINTS: dict[type[DPReleaseError], str] = {
    UnknownScope: "If this is the scope's first release, launch again with run config "
    "create_scope: true; otherwise check DPRELEASE_LEDGER_URL",
}
#: A missing ledger in production, in Dagster's terms (the library's words speak of the CLI's
#: --ledger and of a release that creates a ledger, which a production run does not).
NO_LEDGER = (
    "nothing was created. DPRELEASE_LEDGER_URL must name the existing ledger; only the very "
    "first release into a new ledger is launched with run config create_scope: true"
)


def amount(value: Fraction | int) -> str:
    """An exact amount (a ρ or an ε, a cap, what a scope spent) as the UI shows it: the one
    formatter every metadata entry and message of the code location goes through."""
    return amount_text(value)


def amount_words(unit: str, value: Fraction | int) -> str:
    """An amount with its unit's symbol, for a short cell: `ε = 1/3 ≈ 0.333`, `ρ = 0.0125`."""
    return f"{unit} = {amount(value)}"


def loss_words(scope: ScopeStatus, value: Fraction | int) -> str:
    """An amount of a scope's loss in a sentence: named by its measure, and a ρ with the (ε, δ)
    it implies at the scope's δ (`loss.loss_text`, the library's one spelling)."""
    return loss_text(scope.measure, value, scope.delta)


def number_text(value: object) -> str:
    """A released number as people read it: whole numbers with thousands separators and no
    trailing .0 (15,870,000, a margin of 108), others as the files hold them."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float) and abs(value) >= 1000:
        return f"{value:,}"
    return str(value)


class _RunLog(logging.Handler):
    """The library's operator channel as warnings in one run's log."""

    def __init__(self, context: dg.AssetExecutionContext) -> None:
        super().__init__(logging.WARNING)
        self.context = context

    def emit(self, record: logging.LogRecord) -> None:
        self.context.log.warning(in_dagster_words(record.getMessage()))


@contextmanager
def operator_warnings_in_run_log(context: dg.AssetExecutionContext) -> Iterator[None]:
    """Forward the `dprelease.operator` logger (warnings that depend on the data: an empty period,
    an input changed since its release) to the run log, which stays inside the secure boundary;
    they never reach metadata."""
    handler = _RunLog(context)
    logger = logging.getLogger(LOGGER_NAME)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


def in_dagster_words(text: str) -> str:
    """The library's words, with the Launchpad option where they name the CLI's flag."""
    return text.replace("--force-new", "run config force_new: true")


def refusal(exc: DPReleaseError) -> str:
    """A typed, data-free refusal in words for the run's error."""
    if isinstance(exc, BudgetExhausted):
        exc = exc.with_action(_budget_action(exc))
    if isinstance(exc, LedgerNotFound):  # where the ledger was looked for, then what to do
        return f"{str(exc).split(';')[0]}; {NO_LEDGER}"
    hint = PRODUCTION_HINTS.get(type(exc))
    return in_dagster_words(str(exc)) + (f". {hint}" if hint else "")


class Refusal(DagsterUserCodeProcessError, dg.Failure):
    """A refused release as the Dagster UI shows it: one message, and its facts as metadata.

    Under the message of whatever fails a step, Dagster shows the Python stack it was raised
    through: Dagster's own frames and the one `raise`, which tell an operator nothing about a
    refusal (not a crash) and bury the message the README promises. An error that stands for
    one raised in another process (`DagsterUserCodeProcessError`, how Dagster passes on a code
    server's error) is reported as the error it carries, so a Failure that is also one is shown
    with its message alone, and Dagster still records it as a Failure with its description and
    metadata. (That class is not exported by Dagster: `tests/system/test_pipelines_ui.py` and
    the browser test in `test_e2e_dagster.py` fail if a Dagster upgrade shows a stack again.)
    """

    def __init__(self, description: str, metadata: Mapping[str, str]) -> None:
        dg.Failure.__init__(self, description, metadata, allow_retries=False)
        self.user_code_process_error_infos = [
            SerializableErrorInfo(message=description, stack=[], cls_name=type(self).__name__)
        ]


def refused(
    release: str, period: str | None, scope: str, exc: DPReleaseError | ConfidentialTableMissing
) -> Refusal:
    """The refusal of one release (and month) in words, its facts (exact amounts) beside it."""
    facts = {"release": release, "period": period or "all", "scope": scope}
    facts["refused"] = type(exc).__name__
    if isinstance(exc, BudgetExhausted):
        facts |= {
            "spent": amount(exc.spent),
            "cap": amount(exc.cap),
            "requested": amount(exc.requested),
            "remaining": amount(exc.remaining),
        }
    words = refusal(exc) if isinstance(exc, DPReleaseError) else str(exc)
    return Refusal(f"{release} {period or ''}".strip() + f": {words}", facts)


def _budget_action(exc: BudgetExhausted) -> str:
    """What an operator can do about a refused budget in the pipeline, where a release's ε is
    its spec's `publish.share` of the scope's cap (no ε is typed): a smaller share while some
    budget remains, or a higher cap on purpose."""
    set_cap = f"`dprelease ledger set-cap {exc.scope} CAP --reason TEXT`"
    smaller = (
        f"lower the spec's publish.share to at most {typed_text(exc.remaining / exc.cap)}, or "
        if exc.remaining
        else ""
    )
    return f"To go on, {smaller}raise the scope's cap on purpose: {set_cap}."
