"""`dprelease plan`: what a release of a spec states at an ε, and the smallest ε for target
margins of error, before any data is read or any budget spent."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from dprelease.cli._app import app
from dprelease.cli._common import cli_errors, parse_epsilon
from dprelease.config import choose_budget, load_privacy_config
from dprelease.errors import ConfigError
from dprelease.planner import ReleasePlan, plan
from dprelease.profile import Neighbours, cap_from_profile
from dprelease.rational import Epsilon
from dprelease.spec import load_spec


def _targets(given: list[str]) -> dict[str, float]:
    """`name=value` pairs; ConfigError naming --target otherwise."""
    targets = {}
    for item in given:
        name, equals, value = item.partition("=")
        try:
            targets[name.strip()] = float(value)
        except ValueError:
            equals = ""
        if not equals or not name.strip():
            raise ConfigError("--target", f"{item!r}: give NAME=MARGIN, e.g. visits=25")
    return targets


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.4g}"


def _table(planned: ReleasePlan) -> Table:
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("statistic", overflow="fold")
    table.add_column("kind")
    for column in ("ε", "Δ", "scale", "±95%", "target"):
        table.add_column(column, justify="right", no_wrap=True)
    for row in planned.statistics:
        target = "" if row.target_moe95 is None else _num(row.target_moe95)
        if row.target_met is not None:
            target += " ok" if row.target_met else " MISSED"
        table.add_row(
            row.name,
            row.kind,
            _num(row.epsilon),
            _num(row.sensitivity),
            _num(row.scale),
            "per cell" if row.moe95 is None else _num(row.moe95),
            target,
        )
    return table


def _print(planned: ReleasePlan) -> None:
    console = Console(highlight=False)
    console.print(
        f"release {planned.release!r} at ε = {planned.epsilon_total:g} "
        f"({planned.epsilon_total_exact}), split by {planned.budget_split}, "
        f"{planned.neighbours.value} neighbours"
    )
    console.print(_table(planned))
    for row in planned.statistics:
        how = f"reuses {', '.join(row.reuses)}; " if row.reuses else ""
        console.print(f"{row.name}: {how}{row.derivation}")
    if planned.epsilon_for_targets is not None:
        console.print(
            f"smallest ε meeting every target: {planned.epsilon_for_targets:g} "
            f"({planned.epsilon_for_targets_exact})"
        )


@app.command("plan")
@cli_errors
def plan_command(
    spec: Annotated[Path, typer.Option("--spec", help="Release spec YAML (`release:` section).")],
    epsilon: Annotated[
        str | None,
        typer.Option("--epsilon", help="ε of the release, e.g. 0.25 or 1/4.", show_default=False),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="Privacy YAML: its ε (and neighbours) as a release uses."),
    ] = None,
    target: Annotated[
        list[str] | None,
        typer.Option(
            "--target",
            help="Wanted 95% margin of error, NAME=MARGIN (repeatable); overrides target_moe95.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
) -> None:
    """Per statistic ε, Δ, noise scale and 95% margin of error; with targets, the smallest ε
    that meets them. Reads no data and spends nothing."""
    loaded = load_spec(spec)
    chosen: Epsilon | None = None if epsilon is None else parse_epsilon(epsilon, "--epsilon")
    neighbours: Neighbours | None = None
    if config is not None:
        choice = choose_budget(load_privacy_config(config))
        neighbours = choice.neighbours
        chosen = chosen if chosen is not None else cap_from_profile(choice)
    planned = plan(loaded.spec, chosen, targets=_targets(target or []), neighbours=neighbours)
    if as_json:
        typer.echo(planned.model_dump_json(indent=2))
    else:
        _print(planned)
