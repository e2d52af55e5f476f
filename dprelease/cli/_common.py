"""What every command shares: library errors become exit code 2 with one line on stderr, every ε
typed on the command line is read by the one exact-rational parser, and every command that
charges opens its ledger the one way (`ledger_after_checks`)."""

from __future__ import annotations

import functools
import os
import shlex
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, ParamSpec, TypeVar, cast

import typer

from dprelease.errors import BudgetExhausted, ConfigError, DPReleaseError, LedgerNotFound
from dprelease.loss import amount_text, decimal_text, exact_positive, typed_text

if TYPE_CHECKING:
    from rich.console import Console

    from dprelease.ledger import Ledger
    from dprelease.spec import TableFormat

#: How `decide_budget`'s errors name the command line's options.
CLI_WORDS_FOR_BUDGET = {
    "epsilon": "--epsilon",
    "rho": "--rho",
    "cap": "--cap",
    "privacy": "--config",
    "scope": "--scope",
}

#: Options `plan` and `release` share.
SpecOption = Annotated[
    Path,
    typer.Option("--spec", help="Spec YAML (`release:`, and `publish:` if it has one)."),
]
ReleaseScopeOption = Annotated[
    str | None,
    typer.Option("--scope", help="Budget scope (default: publish.scope, else the spec's name)."),
]

#: Options of the commands that charge a ledger (`release`, `consortium`, `local wave`).
LedgerOption = Annotated[
    str | None,
    typer.Option(
        "--ledger",
        help="Ledger URL or SQLite path (default: $DPRELEASE_LEDGER_URL or "
        ".dprelease/ledger.sqlite).",
    ),
]
PeriodOption = Annotated[
    str | None, typer.Option("--period", help="Reporting period (YYYY-MM for monthly specs).")
]

SelectionDeltaOption = Annotated[
    str | None,
    typer.Option(
        "--selection-delta",
        help="The scope's δ budget for key selection (select: true), kept for life, e.g. 1e-9; "
        "a release spends its loss's share of it. Not the δ ρ is read at.",
        show_default=False,
    ),
]


def parse_delta(text: str | None) -> Fraction | None:
    """--selection-delta exactly (1e-9 is 1/10⁹); ConfigError naming it unless 0 < δ < 1/2."""
    if text is None:
        return None
    delta = parse_epsilon(text, "--selection-delta", "δ")
    if delta >= Fraction(1, 2):
        raise ConfigError("--selection-delta", f"δ = {text} is not small: give δ < 1/2, e.g. 1e-9")
    return delta


P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

EXIT_BAD_INPUT = 2
#: The width of a report written to a file or a pipe: wide enough that nothing wraps or is cut.
UNWRAPPED_WIDTH = 10_000


def fail(message: str) -> typer.Exit:
    """Print one line on stderr and return the exit to raise (code 2: bad input)."""
    print(f"error: {message}".replace("\n", " "), file=sys.stderr)
    return typer.Exit(code=EXIT_BAD_INPUT)


def report_console() -> Console:
    """The console a command prints its report on: a terminal's width in a terminal; in a file
    or a pipe unwrapped (unless $COLUMNS asks for a width), so that a scope name, a release id
    or an amount read by a script is never split over two lines. (Rich would take the width of
    whichever standard stream is a terminal: stderr's, when only stdout is piped.)"""
    from rich.console import Console

    console = Console(highlight=False)
    if console.is_terminal or "COLUMNS" in os.environ:
        return console
    return Console(highlight=False, width=UNWRAPPED_WIDTH)


def warn(message: str) -> None:
    """One line for the operator on stderr (never part of any published output)."""
    print(f"warning: {message}".replace("\n", " "), file=sys.stderr)


def parse_formats(text: str) -> list[TableFormat]:
    """`--format xlsx,sdmx`: table formats, each once; ConfigError naming the option."""
    from dprelease.spec import TABLE_FORMATS, missing_writer

    chosen = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [part for part in chosen if part not in TABLE_FORMATS]
    if not chosen or unknown:
        given = repr(unknown[0]) if unknown else "nothing"
        raise ConfigError("--format", f"{given} is not a format: give {', '.join(TABLE_FORMATS)}")
    if len(set(chosen)) != len(chosen):
        raise ConfigError("--format", "list each format once")
    if (problem := missing_writer(chosen)) is not None:
        raise ConfigError("--format", problem)
    return cast("list[TableFormat]", chosen)


def parse_epsilon(text: str, option: str, what: str = "ε") -> Fraction:
    """An amount from the command line, exactly: ``0.1`` is 1/10, ``1/3`` is 1/3; ConfigError
    naming `what` it is (ε, ρ, or a cap in the scope's own unit) if not a finite number > 0
    (typer's own float parsing would round and print a multi-line box)."""
    try:
        return exact_positive(text.strip())
    except ValueError as exc:
        raise ConfigError(
            option, f"{what} {exc} (a decimal such as 0.25, or a fraction such as 1/3)"
        ) from None


def in_cli_words(exc: DPReleaseError) -> str:
    """A typed error as the command line tells it: a refused budget ends with what to do here
    (a smaller --epsilon, or `dprelease ledger set-cap`)."""
    if not isinstance(exc, BudgetExhausted):
        return str(exc)
    set_cap = f"`dprelease ledger set-cap {shlex.quote(exc.scope)} CAP --reason TEXT`"
    smaller = (
        f"release with --{exc.option} {_what_to_type(exc.remaining)} or less, or "
        if exc.remaining
        else ""
    )
    return str(exc.with_action(f"To go on, {smaller}raise the scope's cap on purpose: {set_cap}."))


def _what_to_type(amount: Fraction) -> str:
    """The exact remainder as one types it: a terminating decimal as itself (0.113988628768, not
    3562144649/31250000000), a short fraction as itself (1/3), a long one with its rounded decimal
    beside it; exact so that the whole remainder can be spent, readable at a glance."""
    readable = amount_text(amount)  # a terminating decimal as itself: 0.113988628768
    if "≈" not in readable:
        return readable
    exact = typed_text(amount)
    return exact if len(exact) <= _SHORT else f"{exact} (≈ {decimal_text(amount, 3)})"


#: A typed amount longer than this (not 1/3, 58/375 or 0.003) gets its decimal beside it.
_SHORT = 9


def cli_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn the library's typed errors (and unreadable files) into the one-line exit-2 contract."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except DPReleaseError as exc:
            raise fail(in_cli_words(exc)) from None
        except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
            raise fail(str(exc)) from None

    return wrapper


@contextmanager
def open_existing_ledger(url: str | None) -> Iterator[Ledger | None]:
    """The ledger at `url` if one is given (it must exist: reading never creates one), else
    None; closed afterwards."""
    if url is None:
        yield None
        return
    from dprelease.ledger import Ledger

    with Ledger(url, mode="read") as ledger:
        yield ledger


def ledger_after_checks(url: str | None, checks: Callable[[Ledger | None], T]) -> tuple[Ledger, T]:
    """The ledger a command charges, and what `checks` made of it (a budget, a plan): the ledger
    at `url` if one exists (closed if a check fails), else one created only once every check
    passed (`checks` gets None), said on stderr: a mistyped path must not pass unnoticed, it is
    a fresh budget."""
    from dprelease.ledger import Ledger

    try:
        existing: Ledger | None = Ledger(url, mode="existing")
    except LedgerNotFound:
        existing = None
    try:
        checked = checks(existing)
    except BaseException:
        if existing is not None:
            existing.close()
        raise
    book = existing or Ledger(url, mode="create")
    if book.created:
        typer.echo(f"created a new, empty ledger at {book.display_url}", err=True)
    return book, checked
