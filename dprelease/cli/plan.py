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
    from dprelease.statement import MeasureComparison, ReleasePlan
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
    for column in (planned.measure.symbol, "Δ", "scale", "±95%", "target"):
        table.add_column(column, justify="right", no_wrap=True)
    for row in planned.statistics:
        target = "" if row.target_moe95 is None else _num(row.target_moe95)
        if row.target_met is not None:
            target += " ok" if row.target_met else " MISSED"
        table.add_row(
            row.name,
            row.kind,
            _num(row.epsilon if row.rho is None else row.rho),
            _num(row.sensitivity),
            _num(row.scale),
            "per cell" if row.moe95 is None else _num(row.moe95),
            target,
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
    for column in (planned.measure.symbol, "scale", "±95%"):
        table.add_column(column, justify="right", no_wrap=True)
    for name, level in rows:
        spends = level.epsilon if level.rho is None else level.rho
        table.add_row(name, level.level, _num(spends), _num(level.scale), _range(level.moe95))
    return table


def _comparison_table(comparison: MeasureComparison) -> Table:
    """Margins under pure ε (Laplace) and zCDP (Gaussian) at the same odds profile."""
    table = Table(
        box=box.SIMPLE_HEAD,
        title=f"pure ε or zCDP? as one of {comparison.releases} release(s) of the scope: "
        f"ε = {comparison.epsilon_exact} (Laplace) or ρ = {comparison.rho_exact} (Gaussian, "
        f"odds statement with probability ≥ 1 − {comparison.delta:g})",
        title_justify="left",
    )
    table.add_column("statistic", overflow="fold")
    for column in ("±95% pure ε", "±95% zCDP", "smaller"):
        table.add_column(column, justify="right", no_wrap=True)
    for row in comparison.statistics:
        table.add_row(
            row.name,
            "per cell" if row.pure_moe95 is None else _num(row.pure_moe95),
            "per cell" if row.zcdp_moe95 is None else _num(row.zcdp_moe95),
            row.smaller or "–",
        )
    return table


def _print(planned: ReleasePlan) -> None:
    console = Console(highlight=False)
    if planned.rho_total is not None:
        spends = f"ρ = {planned.rho_total:g} ({planned.rho_total_exact}, zCDP)"
    else:
        spends = f"ε = {planned.epsilon_total:g} ({planned.epsilon_total_exact})"
    console.print(
        f"release {planned.release!r} at {spends}, {planned.mechanism.value} noise, split by "
        f"{planned.budget_split}, {planned.neighbours.value} neighbours"
    )
    console.print(_table(planned))
    if (levels := _levels_table(planned)) is not None:
        console.print(levels)
    for row in planned.statistics:
        how = f"reuses {', '.join(row.reuses)}; " if row.reuses else ""
        console.print(f"{row.name}: {how}{row.derivation}")
    if planned.epsilon_for_targets is not None:
        console.print(
            f"smallest {planned.measure.symbol} meeting every target: "
            f"{planned.epsilon_for_targets:g} ({planned.epsilon_for_targets_exact})"
        )
    if planned.comparison is not None:
        console.print(_comparison_table(planned.comparison))
        console.print(f"smaller margins: {planned.comparison.smaller}")


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
    rho: Annotated[
        str | None,
        typer.Option("--rho", help="ρ of a zCDP release, e.g. 0.01 or 1/100.", show_default=False),
    ] = None,
    compare: Annotated[
        bool,
        typer.Option(
            "--compare",
            help="Also plan it under pure ε (Laplace) and zCDP (Gaussian) at the same odds "
            "profile (--config), and say which margins are smaller.",
        ),
    ] = False,
    delta: Annotated[
        float | None,
        typer.Option(
            "--delta",
            help="With --compare: δ of the zCDP statement (default: the profile's, else 1e-9).",
            show_default=False,
        ),  # fmt: skip
    ] = None,
    releases: Annotated[
        int | None,
        typer.Option(
            "--releases",
            help="With --compare: equal releases sharing the scope's budget (default: "
            "1/publish.share).",
            show_default=False,
        ),
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
    from dprelease.budget import load_privacy_profiles
    from dprelease.publish import Options, decide_budget, plan_budget
    from dprelease.spec import load_spec

    resolved = load_spec(spec)
    chosen = None if epsilon is None else parse_epsilon(epsilon, "--epsilon")
    chosen_rho = None if rho is None else parse_epsilon(rho, "--rho")
    privacy = None if config is None else load_privacy_profiles(config)
    with open_existing_ledger(ledger_url) as book:
        budget = decide_budget(
            resolved,
            scope=scope,
            privacy=privacy,
            ledger=book,
            epsilon=chosen,
            rho=chosen_rho,
            require_loss=False,  # the planner asks for ε or targets in its own words
            options=Options(**CLI_WORDS_FOR_BUDGET),
        )
    planned = plan_budget(
        resolved,
        budget,
        targets=_targets(target or []),
        compare=compare,
        delta=delta,
        releases=releases,
    )
    if as_json:
        typer.echo(planned.model_dump_json(indent=2))
    else:
        _print(planned)
