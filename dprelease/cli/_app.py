"""The typer app every command module adds itself to."""

import typer

app = typer.Typer(
    name="dprelease",
    help="Differentially private releases with epsilon chosen from odds risk profiles.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
