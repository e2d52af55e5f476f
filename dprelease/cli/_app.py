"""The typer app every command module adds itself to."""

import logging
import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperGroup

try:  # typer ≥ 0.24 carries its own copy of click; its commands raise that copy's errors
    from typer import _click as click
except ImportError:  # pragma: no cover - an older typer runs on click itself
    import click  # type: ignore[no-redef]

from dprelease.cli._common import EXIT_BAD_INPUT, warn
from dprelease.operator import LOGGER_NAME


def usage_line(exc: click.exceptions.UsageError) -> str:
    """A usage error (an unknown or misspelt flag, a missing option or argument, a value of
    the wrong type, an unknown command) as the one line every refusal is: what is wrong, in
    click's words, and where the command's options are listed."""
    where = exc.ctx.command_path if exc.ctx is not None else "dprelease"
    message = " ".join(exc.format_message().split()).rstrip(".")
    return f"{where}: {message}; see `{where} --help`"


class OneLineErrors(TyperGroup):
    """The root command: a usage error is one `error:` line on stderr with exit code 2, like
    every other refusal, instead of click's usage box (usage, hint and message on three lines).
    Asking for help (`--help`, or a group without its command) still prints the help."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.exceptions.UsageError as exc:
            print(f"error: {usage_line(exc)}", file=sys.stderr)
            sys.exit(EXIT_BAD_INPUT)
        except click.exceptions.ClickException as exc:
            print(f"error: {' '.join(exc.format_message().split())}", file=sys.stderr)
            sys.exit(exc.exit_code)
        except typer.Abort:
            print("Aborted!", file=sys.stderr)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    name="dprelease",
    help="Differentially private releases with epsilon chosen from odds risk profiles.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help and usage errors: no rich formatting machinery at start
    cls=OneLineErrors,
)


class _OperatorToStderr(logging.Handler):
    """Operator warnings as `warning: …` lines on the current stderr (never in any output)."""

    def emit(self, record: logging.LogRecord) -> None:
        warn(record.getMessage())


@app.callback()
def _show_operator_warnings() -> None:
    logger = logging.getLogger(LOGGER_NAME)
    if not any(isinstance(handler, _OperatorToStderr) for handler in logger.handlers):
        logger.addHandler(_OperatorToStderr(logging.WARNING))
