"""`dprelease` command line: one typer app, one module per command group."""

import dprelease.cli.consortium  # noqa: F401  (`dprelease consortium ...`)
from dprelease.cli import epsilon, ledger, local, plan, release, validate  # noqa: F401  (each registers its commands)
from dprelease.cli._app import app


def main() -> None:
    app()
