"""`dprelease epsilon`: the budget an odds risk profile implies, as tables, JSON or plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from dprelease.cli._app import app
from dprelease.cli._common import cli_errors
from dprelease.errors import ConfigError

if TYPE_CHECKING:
    from dprelease.budget import BudgetChoice


def _rich_table(title: str, table: tuple[list[str], list[list[str]]]) -> Table:
    header, rows = table
    rendered = Table(title=title, title_justify="left")
    for index, column in enumerate(header):
        rendered.add_column(column, justify="left" if index == 0 else "right")
    for row in rows:
        rendered.add_row(*row)
    return rendered


def _print_tables(choice: BudgetChoice) -> None:
    from dprelease.budget import (
        adversary_table,
        budget_summary,
        companion_text,
        group_privacy_table,
    )

    console = Console()
    for sentence in budget_summary(choice):
        console.print(sentence, highlight=False)
    if choice.adversaries:
        console.print(_rich_table("Adversaries", adversary_table(choice)))
    console.print(
        _rich_table("Group privacy (households of k people)", group_privacy_table(choice))
    )
    if companion := companion_text(choice):
        console.print(companion, highlight=False)


def _plot_directory(plot: Path) -> Path:
    """Fail before anything is written if the plot directory cannot be one, or holds a figure's
    name as something other than a regular file (a FIFO would block, a device be replaced)."""
    from dprelease.budget import EPSILON_PNG, PROFILE_PNG
    from dprelease.files import replaceable_target

    if plot.exists() and not plot.is_dir():
        raise ConfigError("--plot", f"{plot} exists and is not a directory; give a directory")
    for name in (PROFILE_PNG, EPSILON_PNG):
        replaceable_target(plot / name, "--plot")
    return plot


@app.command()
@cli_errors
def epsilon(
    config: Annotated[
        Path, typer.Option("--config", "-c", help="YAML file with a top-level `privacy:` section.")
    ],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of tables.")
    ] = False,
    plot: Annotated[
        Path | None,
        typer.Option("--plot", help="Write profile.png and epsilon.png into this directory."),
    ] = None,
    scope: Annotated[
        str | None,
        typer.Option(
            "--scope",
            help="A budget scope: its `scopes:` profile, or the default one if it has none.",
        ),
    ] = None,
) -> None:
    """ε_min from the odds risk profile, the adversaries it protects against, group privacy."""
    from dprelease.budget import choose_budget, load_privacy_profiles, write_plots

    if scope is not None:
        from dprelease.ledger import scope_name_problem

        if (problem := scope_name_problem(scope)) is not None:
            raise ConfigError("--scope", problem)
    profiles = load_privacy_profiles(config)
    choice = choose_budget(profiles.for_scope(scope))
    plot_directory = _plot_directory(plot) if plot is not None else None
    whose = None if scope is None else "own" if scope in profiles.scopes else "default"
    if as_json:
        data = choice.to_json_dict()
        if whose is not None:
            data = {"scope": scope, "scope_profile": whose, **data}
        typer.echo(json.dumps(data, allow_nan=False))
    else:
        if whose is not None:
            typer.echo(
                f"scope {scope!r}: its own profile (scopes.{scope})"
                if whose == "own"
                else f"scope {scope!r} is not listed under `scopes:`: the default `privacy:` "
                "profile applies"
            )
        _print_tables(choice)
    if plot_directory is not None:
        try:
            paths = write_plots(choice, plot_directory)
        except OSError as exc:
            raise ConfigError("--plot", f"cannot write plots to {plot_directory}: {exc}") from None
        if not as_json:
            typer.echo(f"plots: {paths[0]}, {paths[1]}")
