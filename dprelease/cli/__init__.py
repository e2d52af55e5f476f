"""`dprelease` command line: one typer app, one module per command group."""

from dprelease.cli import epsilon, ledger, plan, release, validate  # noqa: F401  (each registers its commands)
from dprelease.cli._app import app


def main() -> None:
    app()
