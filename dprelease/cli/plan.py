"""`dprelease plan`: what a release of a spec states at an ε, and the smallest ε for target
margins of error, before any data is read or any budget spent."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from dprelease.cli._app import app
from dprelease.cli._common import (
    CLI_WORDS_FOR_BUDGET,
    ReleaseScopeOption,
    SpecOption,
    cli_errors,
    open_existing_ledger,
    parse_epsilon,
)
from dprelease.errors import ConfigError

if TYPE_CHECKING:
    from dprelease.statement import ReleasePlan, StatisticAccuracy
    from dprelease.statement._manifest import MoeRange


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
            _margin(row),
            target,
        )
    return table


def _margin(row: StatisticAccuracy) -> str:
    """The ±95% column: a margin, a mean's "per cell", or a quantile's rank error."""
    if row.quantiles:
        return "ranks ↓"
    return "per cell" if row.moe95 is None else _num(row.moe95)


def _quantiles_table(planned: ReleasePlan) -> Table | None:
    """Quantile statistics: each p's 95% rank error and interval half-width (data-free)."""
    rows = [(row.name, q) for row in planned.statistics for q in row.quantiles or []]
    if not rows:
        return None
    table = Table(box=box.SIMPLE_HEAD, title="quantiles: 95% errors in ranks", title_justify="left")
    for column in ("statistic", "column", "p"):
        table.add_column(column, overflow="fold")
    for column in ("rank error", "interval ±ranks"):
        table.add_column(column, justify="right", no_wrap=True)
    for name, q in rows:
        table.add_row(
            name, q.column, f"{q.p:g}", _num(q.rank_error95), _num(q.interval_rank_halfwidth95)
        )
    return table


def _range(moe: float | MoeRange) -> str:
    return _num(moe) if isinstance(moe, float) else f"{_num(moe.min)}–{_num(moe.max)}"


def _levels_table(planned: ReleasePlan) -> Table | None:
    """With margins: each statistic's levels, their ε and noise, and the margin of error of
    the released values (consistent and rounded); None without margins."""
    rows = [(row.name, level) for row in planned.statistics for level in row.levels or []]
    if not rows:
        return None
    table = Table(box=box.SIMPLE_HEAD, title="95% margins of error per level", title_justify="left")
    table.add_column("statistic", overflow="fold")
    table.add_column("level", overflow="fold")
    for column in ("ε", "scale", "±95%"):
        table.add_column(column, justify="right", no_wrap=True)
    for name, level in rows:
        table.add_row(
            name, level.level, _num(level.epsilon), _num(level.scale), _range(level.moe95)
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
    if (levels := _levels_table(planned)) is not None:
        console.print(levels)
    if (quantiles := _quantiles_table(planned)) is not None:
        console.print(quantiles)
    for row in planned.statistics:
        how = f"reuses {', '.join(row.reuses)}; " if row.reuses else ""
        console.print(f"{row.name}: {how}{row.derivation}", markup=False)
        if row.error_in_units is not None:
            console.print(f"{row.name}, error {row.error_in_units}", markup=False)
    if planned.epsilon_for_targets is not None:
        console.print(
            f"smallest ε meeting every target: {planned.epsilon_for_targets:g} "
            f"({planned.epsilon_for_targets_exact})"
        )


@app.command("plan")
@cli_errors
def plan_command(
    spec: SpecOption,
    epsilon: Annotated[
        str | None,
        typer.Option("--epsilon", help="ε of the release, e.g. 0.25 or 1/4.", show_default=False),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="Privacy YAML: plan at the ε a release spends (the spec's `publish.share` of "
            "its scope's cap), as `dprelease release` and the pipeline do.",
        ),
    ] = None,
    ledger_url: Annotated[
        str | None,
        typer.Option(
            "--ledger",
            help="Ledger URL or SQLite path: an existing scope's cap there (not the profile's) "
            "is the cap in force.",
        ),
    ] = None,
    scope: ReleaseScopeOption = None,
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
    from dprelease.budget import load_privacy_profiles
    from dprelease.publish import Options, decide_budget
    from dprelease.spec import load_spec
    from dprelease.statement import plan

    resolved = load_spec(spec)
    chosen = None if epsilon is None else parse_epsilon(epsilon, "--epsilon")
    privacy = None if config is None else load_privacy_profiles(config)
    with open_existing_ledger(ledger_url) as book:
        budget = decide_budget(
            resolved,
            scope=scope,
            privacy=privacy,
            ledger=book,
            epsilon=chosen,
            require_loss=False,  # the planner asks for ε or targets in its own words
            options=Options(**CLI_WORDS_FOR_BUDGET),
        )
    planned = plan(resolved, budget.loss, budget.change, targets=_targets(target or []))
    if as_json:
        typer.echo(planned.model_dump_json(indent=2))
    else:
        _print(planned)
