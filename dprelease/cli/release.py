"""`dprelease release`: one spec, one dataset, one period → noisy files, through the ledger."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from dprelease.cli._app import app
from dprelease.cli._common import cli_errors
from dprelease.config import choose_budget, load_privacy_config
from dprelease.errors import ConfigError, LedgerError
from dprelease.ledger import Ledger
from dprelease.profile import Neighbours, cap_from_profile
from dprelease.publish import STATUS_TEXT, publish
from dprelease.release import as_fraction, prepare
from dprelease.spec import load_spec


def _budget(
    epsilon: float | None, config: Path | None, cap: float | None
) -> tuple[Fraction, Fraction | None, Neighbours | None]:
    """(ε of this release, the scope's cap if the user stated one, neighbours from the config)."""
    if epsilon is None and config is None:
        raise ConfigError("--epsilon", "give --epsilon X or --config PRIVACY_YAML")
    neighbours = None
    stated_cap = as_fraction(cap, "--cap") if cap is not None else None
    if config is not None:
        privacy = load_privacy_config(config)
        choice = choose_budget(privacy)
        neighbours = choice.neighbours
        stated_cap = stated_cap or cap_from_profile(choice)
    chosen = as_fraction(epsilon, "--epsilon") if epsilon is not None else stated_cap
    return chosen, stated_cap, neighbours


def _ensure_scope(
    ledger: Ledger, scope: str, cap: Fraction | None, first: Fraction, composition: str
) -> None:
    """Use the scope as the ledger knows it; a new scope's cap is the stated one, else this ε."""
    if cap is not None:
        ledger.ensure_scope(scope, cap, composition)
        return
    try:
        ledger.status(scope)
    except LedgerError:
        Console(stderr=True, soft_wrap=True).print(
            f"new budget scope {scope!r}: its lifetime cap is this release's ε = {float(first):g} "
            "(give --cap or --config to set a larger one)",
            highlight=False,
        )
        ledger.ensure_scope(scope, first, composition)


@app.command()
@cli_errors
def release(
    spec: Annotated[Path, typer.Option("--spec", help="Release spec YAML (`release:` section).")],
    data: Annotated[Path, typer.Option("--data", help="Confidential input: parquet or CSV.")],
    out: Annotated[Path, typer.Option("--out", help="Directory for the published files.")],
    epsilon: Annotated[
        float | None, typer.Option("--epsilon", help="ε of this release (total over its columns).")
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="Privacy YAML: ε_min from its odds risk profile is the cap."),
    ] = None,
    ledger_url: Annotated[
        str | None,
        typer.Option(
            "--ledger",
            help="Ledger URL or SQLite path (default: $DPRELEASE_LEDGER_URL "
            "or .dprelease/ledger.sqlite).",
        ),
    ] = None,
    scope: Annotated[
        str | None, typer.Option("--scope", help="Budget scope (default: the spec's name).")
    ] = None,
    cap: Annotated[float | None, typer.Option("--cap", help="Lifetime cap of a new scope.")] = None,
    period: Annotated[
        str | None, typer.Option("--period", help="Reporting period (YYYY-MM for monthly specs).")
    ] = None,
    force_new: Annotated[
        bool, typer.Option("--force-new", help="Release again with fresh noise; charged again.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the manifest as JSON.")] = False,
) -> None:
    """Release noisy grouped counts and sums; refuse if the scope's budget would be exceeded."""
    if out.exists() and not out.is_dir():
        raise ConfigError("--out", f"{out} exists and is not a directory")
    loaded = load_spec(spec)
    chosen, stated_cap, neighbours = _budget(epsilon, config, cap)
    prepared = prepare(data, loaded, chosen, neighbours=neighbours, period=period)
    ledger = Ledger(ledger_url)
    if ledger.created:  # a mistyped path must not pass unnoticed: it is a fresh budget
        Console(stderr=True, soft_wrap=True).print(
            f"created a new, empty ledger at {ledger.display_url}", highlight=False
        )
    scope_name = scope or loaded.spec.name
    composition = loaded.spec.period.composition if loaded.spec.period else "sequential"
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as progress:
        task = progress.add_task("checking the budget scope")
        _ensure_scope(ledger, scope_name, stated_cap, chosen, composition)
        result = publish(
            prepared,
            ledger=ledger,
            scope=scope_name,
            asset=loaded.spec.name,
            out_dir=out,
            force_new=force_new,
            on_stage=lambda stage: progress.update(task, description=stage),
        )
    if as_json:
        typer.echo(json.dumps(result.manifest, sort_keys=True))
        return
    remaining = ledger.status(scope_name)[0].remaining
    console = Console(soft_wrap=True)
    console.print(f"{result.release_id}: {STATUS_TEXT[result.status]}", highlight=False)
    console.print(
        f"ε = {result.manifest['epsilon_total']:g}; scope {scope_name!r} has "
        f"{float(remaining):g} left; files in {out}",
        highlight=False,
    )
