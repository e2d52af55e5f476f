"""`dprelease validate`: every spec file and the privacy YAML of a pipeline, checked without data,
for CI before a code location is reloaded (`publish.validate_pipeline`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from dprelease.cli._app import app
from dprelease.cli._common import EXIT_BAD_INPUT, cli_errors, warn
from dprelease.errors import ConfigError


@app.command()
@cli_errors
def validate(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Spec files, or directories of them (*.yaml); default: $DPRELEASE_SPECS_DIR.",
            show_default=False,
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="Privacy YAML: checked whole, and each release's budget decided and planned "
            "under its scope's profile; default: $DPRELEASE_PRIVACY_CONFIG.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Check every spec (a directory of them, or named files) and the privacy YAML, as the
    pipeline would load and release them, without data or a ledger. One line per problem and
    exit code 2 if any; a short summary and 0 otherwise."""
    from dprelease.publish import PRIVACY_CONFIG_ENV, SPECS_DIR_ENV, validate_pipeline

    if not paths:
        directory = os.environ.get(SPECS_DIR_ENV)
        if not directory:
            raise ConfigError(
                "PATHS", f"give spec files or a directory of them, or set {SPECS_DIR_ENV}"
            )
        paths = [Path(directory)]
    if config is None and (privacy := os.environ.get(PRIVACY_CONFIG_ENV)):
        config = Path(privacy)
    found = validate_pipeline(paths, config)
    if found.problems:
        for problem in found.problems:
            print(f"error: {problem}".replace("\n", " "), file=sys.stderr)
        raise typer.Exit(EXIT_BAD_INPUT)
    if not found.privacy_checked:
        warn("no privacy YAML given (--config or $DPRELEASE_PRIVACY_CONFIG): budgets not checked")
    scopes = f"{len(found.scopes)} budget scope(s) ({', '.join(found.scopes)})"
    against = f", each budgeted and planned under {config}" if found.privacy_checked else ""
    releases = f"{found.files} spec file(s), {len(found.releases)} release(s)"
    typer.echo(f"ok: {releases}, {scopes}{against}")
