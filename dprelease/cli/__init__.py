"""`dprelease` command line: one typer app, one module per command group."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="dprelease",
    help="Differentially private releases with epsilon chosen from odds risk profiles.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    """Import the command modules; each adds its commands to `app`."""
    import importlib

    for name in ("epsilon", "release", "ledger", "demo"):
        try:
            importlib.import_module(f"dprelease.cli.{name}")
        except ModuleNotFoundError as exc:  # a command group not built yet
            if exc.name != f"dprelease.cli.{name}":
                raise


def main() -> None:
    _register()
    app()
