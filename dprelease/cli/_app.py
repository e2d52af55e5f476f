"""The typer app every command module adds itself to."""

import logging

import typer

from dprelease.cli._common import warn
from dprelease.operator import LOGGER_NAME

app = typer.Typer(
    name="dprelease",
    help="Differentially private releases with epsilon chosen from odds risk profiles.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help and usage errors: no rich formatting machinery at start
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
