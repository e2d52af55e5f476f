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
) -> None:
    """ε_min from the odds risk profile, the adversaries it protects against, group privacy."""
    from dprelease.budget import choose_budget, load_privacy_config, write_plots

    choice = choose_budget(load_privacy_config(config))
    plot_directory = _plot_directory(plot) if plot is not None else None
    if as_json:
        typer.echo(json.dumps(choice.to_json_dict(), allow_nan=False))
    else:
        _print_tables(choice)
    if plot_directory is not None:
        try:
            paths = write_plots(choice, plot_directory)
        except OSError as exc:
            raise ConfigError("--plot", f"cannot write plots to {plot_directory}: {exc}") from None
        if not as_json:
            typer.echo(f"plots: {paths[0]}, {paths[1]}")
