"""`dprelease release`: one spec, one dataset, one period → noisy files, through the ledger."""

from __future__ import annotations

import json
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Annotated

import polars as pl
import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from dprelease.cli._app import app
from dprelease.cli._common import cli_errors, parse_epsilon
from dprelease.config import choose_budget, load_privacy_config
from dprelease.errors import ConfigError, LedgerNotFound, UnknownScope
from dprelease.ledger import Composition, Ledger
from dprelease.margins import level_blocks
from dprelease.profile import Neighbours, cap_from_profile
from dprelease.publish import Published, composition_of, publish
from dprelease.pure_release import prepare
from dprelease.spec import LEVEL_COLUMN, MOE95_SUFFIX, UNDEFINED_SUFFIX, load_spec

PREVIEW_ROWS = 12
#: Margin columns (`_ci95`: releases stored before they were renamed) and a mean's flag column
#: (its null cells show as –): left to the files.
HIDDEN_SUFFIXES = ("_ci95", MOE95_SUFFIX, UNDEFINED_SUFFIX)


@dataclass(frozen=True)
class _Budget:
    epsilon: Fraction  # of this release
    cap_option: Fraction | None  # --cap
    profile_cap: Fraction | None  # the most the profile allows (--config): bounds the ledger's cap
    neighbours: Neighbours | None

    @property
    def new_scope_cap(self) -> Fraction | None:
        """The cap a new scope gets: --cap, else the profile's ε; None: the user stated none."""
        return self.cap_option or self.profile_cap


def _budget(epsilon: str | None, config: Path | None, cap: str | None, scope: str) -> _Budget:
    """ε of this release (default: the whole cap from the scope's profile) and the caps stated.

    The profile is the scope's own (its entry under `scopes:`), else the file's `privacy:`.
    """
    stated_cap = parse_epsilon(cap, "--cap") if cap is not None else None
    profile_cap = neighbours = None
    if config is not None:
        choice = choose_budget(load_privacy_config(config, scope))
        neighbours = choice.neighbours
        profile_cap = cap_from_profile(choice)
        if stated_cap is not None and stated_cap > profile_cap:
            raise ConfigError(
                "--cap",
                f"{float(stated_cap):g} exceeds the ε the privacy profile allows "
                f"({float(profile_cap):g})",
            )
    if epsilon is not None:
        chosen = parse_epsilon(epsilon, "--epsilon")
    elif profile_cap is not None:
        chosen = stated_cap or profile_cap
    else:
        raise ConfigError("--epsilon", "give --epsilon X or --config PRIVACY_YAML")
    return _Budget(chosen, stated_cap, profile_cap, neighbours)


def _open_scope(url: str | None, scope: str, budget: _Budget, composition: Composition) -> Ledger:
    """The ledger, with the scope in it. A new scope needs a stated cap; an existing one keeps
    the ledger's cap (the source of truth: `dprelease ledger set-cap` changes it)."""
    cap = budget.new_scope_cap
    new_scope = ConfigError(
        "--cap",
        f"budget scope {scope!r} is new: give --cap EPSILON or --config PRIVACY_YAML "
        "to set its lifetime cap",
    )
    try:
        ledger = Ledger(url, mode="create" if cap is not None else "existing")
    except LedgerNotFound:
        raise new_scope from None
    err = Console(stderr=True, soft_wrap=True, highlight=False)
    if ledger.created:  # a mistyped path must not pass unnoticed: it is a fresh budget
        err.print(f"created a new, empty ledger at {ledger.display_url}")
    try:
        current = ledger.status(scope)[0]
    except UnknownScope:
        if cap is None:
            ledger.close()
            raise new_scope from None
        ledger.ensure_scope(scope, cap, composition)
        err.print(f"new budget scope {scope!r}: lifetime cap ε = {float(cap):g} ({composition})")
        return ledger
    if budget.cap_option is not None and current.cap != budget.cap_option:
        err.print(
            f"budget scope {scope!r} keeps its cap ε = {float(current.cap):g} from the ledger "
            f"(not --cap {float(budget.cap_option):g}); `dprelease ledger set-cap` changes it"
        )
    return ledger


def _eps(value: Fraction) -> str:
    """ε for people: the decimal, plus the exact fraction when the decimal is not exact."""
    text = f"{float(value):g}"
    return text if Fraction(text) == value else f"{text} ({value})"


def _cell(value: object) -> str:
    """A number as wide as it needs and no wider: noise makes far-right digits meaningless."""
    if value is None:
        return "–"
    if isinstance(value, float):
        size = abs(value)
        return (
            f"{value:,.0f}" if size >= 1000 else f"{value:.1f}" if size >= 100 else f"{value:.4g}"
        )
    return f"{value:,}" if isinstance(value, int) else str(value)


def _preview(table: pl.DataFrame) -> Table:
    """The first rows of the released table (of each level, with margins) with its values,
    numbers shortened (never cut); the margin-of-error columns and every digit are in the
    files."""
    shown = table.select(c for c in table.columns if not c.endswith(HIDDEN_SUFFIXES))
    blocks = [
        [[_cell(v) for v in row] for row in block.head(PREVIEW_ROWS).iter_rows()]
        for block in level_blocks(shown)
    ]
    rows = [row for block in blocks for row in block]
    rendered = Table()
    for index, (name, dtype) in enumerate(shown.schema.items()):
        if dtype.is_numeric():
            width = max((len(row[index]) for row in rows), default=1)
            rendered.add_column(name, justify="right", min_width=width, overflow="fold")
        else:
            rendered.add_column(name, overflow="fold")
    for block in blocks:
        for row in block:
            rendered.add_row(*row)
        rendered.add_section()
    return rendered


def _shown_rows(table: pl.DataFrame) -> str:
    """How much of the table (of each level) the preview shows."""

    def of(block: pl.DataFrame) -> str:
        rows = block.height
        shown = f"first {PREVIEW_ROWS} of {rows} rows" if rows > PREVIEW_ROWS else f"{rows} rows"
        shown = "1 row" if rows == 1 else shown
        return f"{shown} of {block[LEVEL_COLUMN][0]}" if LEVEL_COLUMN in block.columns else shown

    return ", ".join(of(block) for block in level_blocks(table))


def _report(result: Published, ledger: Ledger, scope: str) -> None:
    status = ledger.status(scope)[0]
    console = Console(highlight=False)
    console.print(_preview(result.table))
    console.print(
        _shown_rows(result.table) + "; every row and the 95% margins of error are in release.csv"
    )
    console.print(f"{result.release_id}: {result.describe()}")
    console.print(
        f"ε = {_eps(result.stored.epsilon)}; scope {scope!r} has {_eps(status.remaining)} "
        f"of its cap {_eps(status.cap)} left"
    )
    folder = next(iter(result.files.values())).parent
    console.print(f"files in {folder}: {', '.join(result.files)}", soft_wrap=True)


@app.command()
@cli_errors
def release(
    spec: Annotated[Path, typer.Option("--spec", help="Release spec YAML (`release:` section).")],
    data: Annotated[Path, typer.Option("--data", help="Confidential input: parquet or CSV.")],
    out: Annotated[Path, typer.Option("--out", help="Directory for the published files.")],
    epsilon: Annotated[
        str | None,
        typer.Option(
            "--epsilon",
            help="ε of this release, e.g. 0.25 or 1/4 (default: the whole cap).",
            show_default=False,
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="Privacy YAML: ε_min from the scope's odds risk profile (its `scopes:` entry, "
            "else `privacy:`) is the cap.",
        ),
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
    cap: Annotated[
        str | None,
        typer.Option(
            "--cap", help="Lifetime cap of a new scope, e.g. 1 or 1/3.", show_default=False
        ),
    ] = None,
    period: Annotated[
        str | None, typer.Option("--period", help="Reporting period (YYYY-MM for monthly specs).")
    ] = None,
    force_new: Annotated[
        bool, typer.Option("--force-new", help="Release again with fresh noise; charged again.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the manifest as JSON.")] = False,
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            help="polars or spark (default: the spec's `engine:`, else polars). Spark reads "
            "parquet or a table name and runs on $DPRELEASE_SPARK_REMOTE (Spark Connect), "
            "$DPRELEASE_SPARK_MASTER, or local[2].",
        ),
    ] = None,
) -> None:
    """Release noisy grouped counts and sums; refuse if the scope's budget would be exceeded."""
    if out.exists() and not out.is_dir():
        raise ConfigError("--out", f"{out} exists and is not a directory")
    loaded = load_spec(spec)
    scope_name = scope or loaded.spec.name
    budget = _budget(epsilon, config, cap, scope_name)
    prepared = prepare(
        data, loaded, budget.epsilon, neighbours=budget.neighbours, period=period, engine=engine
    )
    with (
        _open_scope(ledger_url, scope_name, budget, composition_of(loaded)) as ledger,
        Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=(progress_console := Console(stderr=True)),
            transient=True,
            disable=not progress_console.is_terminal,  # no spinner residue in logs and pipes
        ) as progress,
    ):
        task = progress.add_task("checking the budget scope")
        result = publish(
            prepared,
            ledger=ledger,
            scope=scope_name,
            asset=loaded.spec.name,
            out_dir=out,
            force_new=force_new,
            max_cap=budget.profile_cap,
            on_stage=lambda stage: progress.update(task, description=stage),
        )
        if as_json:
            typer.echo(json.dumps(result.manifest, sort_keys=True))
        else:
            _report(result, ledger, scope_name)
