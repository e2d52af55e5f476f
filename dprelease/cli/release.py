"""`dprelease release`: one spec, one dataset, one period → noisy files, through the ledger."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from dprelease.cli._app import app
from dprelease.cli._common import (
    CLI_WORDS_FOR_BUDGET,
    LedgerOption,
    PeriodOption,
    ReleaseScopeOption,
    SelectionDeltaOption,
    SpecOption,
    cli_errors,
    ledger_after_checks,
    parse_delta,
    parse_epsilon,
    parse_formats,
)
from dprelease.errors import ConfigError
from dprelease.loss import amount_text, loss_text, typed_text

if TYPE_CHECKING:
    import polars as pl

    from dprelease.ledger import Ledger, ScopeStatus
    from dprelease.publish import Budget, PreparedRelease, Recorded

PREVIEW_ROWS = 12
#: Margin columns (`_ci95`: releases stored before they were renamed, `_moe95` and with the
#: sampling error `_moe95_combined`) and a mean's flag columns (undefined, uninformative): left to
#: the files. A reliability flag (`_flag`) is shown beside its value.
HIDDEN_SUFFIXES = ("_ci95", "_moe95", "_moe95_combined", "_undefined", "_uninformative")


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


def _preview(table: pl.DataFrame) -> tuple[Table, str]:
    """The first rows of the released table (of each level, with margins), numbers shortened
    (never cut), and what part of the table that is; the margin-of-error columns and every digit
    are in the files."""
    from dprelease.statement import preview

    shown = preview(table, rows=PREVIEW_ROWS, hide=HIDDEN_SUFFIXES, cell=_cell)
    rendered = Table()
    for index, (name, numeric) in enumerate(zip(shown.columns, shown.numeric, strict=True)):
        if numeric:
            width = max((len(row[index]) for block in shown.blocks for row in block), default=1)
            rendered.add_column(name, justify="right", min_width=width, overflow="fold")
        else:
            rendered.add_column(name, overflow="fold")
    for block in shown.blocks:
        for row in block:
            rendered.add_row(*row)
        rendered.add_section()
    return rendered, shown.caption


def scope_text(status: ScopeStatus) -> str:
    """A scope's cap and the terms it keeps for life, in words: `lifetime cap ρ = 0.123, i.e.
    (3.33, 1e-09)-DP (sequential, add_remove neighbours, privacy unit column 'pid')`."""
    terms: list[str] = [status.composition]
    if status.neighbours is not None:
        terms.append(f"{status.neighbours.value} neighbours")
    if status.privacy_unit is not None:
        terms.append(f"privacy unit {status.privacy_unit}")
    if status.period_column is not None:
        terms.append(f"months of column {status.period_column!r}")
    cap = loss_text(status.measure, status.cap, status.delta)
    return f"lifetime cap {cap} ({', '.join(terms)})"


def _report(result: Recorded, status: ScopeStatus) -> None:
    console = Console(highlight=False)
    table, caption = _preview(result.table)
    console.print(table)
    console.print(caption + "; every row and the 95% margins of error are in release.csv")
    console.print(f"{result.release_id}: {result.describe()}")
    symbol = status.unit
    this = loss_text(status.measure, result.stored.epsilon, status.delta)
    console.print(
        f"this release: {this}; scope {status.name!r} has {symbol} = "
        f"{amount_text(status.remaining)} of its cap {symbol} = {amount_text(status.cap)} left",
        soft_wrap=True,
    )
    folder = next(iter(result.files.values())).parent
    console.print(f"files in {folder}: {', '.join(result.files)}", soft_wrap=True)


@app.command()
@cli_errors
def release(
    spec: SpecOption,
    data: Annotated[Path, typer.Option("--data", help="Confidential input: parquet or CSV.")],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            help="The release's own folder for its files (published whole: replaced, never "
            "merged with anything else in it).",
        ),
    ],
    epsilon: Annotated[
        str | None,
        typer.Option(
            "--epsilon",
            help="ε of this release, e.g. 0.25 or 1/4 (default: the spec's `publish.share` of "
            "the scope's cap, else the whole cap).",
            show_default=False,
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="Privacy YAML: ε_min from the scope's odds risk profile (its `scopes:` entry, "
            "else `privacy:`) is the most its cap may be, and a new scope's cap.",
        ),
    ] = None,
    ledger_url: LedgerOption = None,
    scope: ReleaseScopeOption = None,
    selection_delta: SelectionDeltaOption = None,
    cap: Annotated[
        str | None,
        typer.Option(
            "--cap", help="Lifetime cap of a new scope, e.g. 1 or 1/3.", show_default=False
        ),
    ] = None,
    rho: Annotated[
        str | None,
        typer.Option(
            "--rho", help="ρ of this release, in a zCDP scope (e.g. 1/100).", show_default=False
        ),
    ] = None,
    period: PeriodOption = None,
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
    formats: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="The table's files, comma-separated: parquet, csv, xlsx, sdmx (default: the "
            "spec file's `publish.formats`, else parquet,csv); manifest.json is always written.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Release noisy grouped counts, sums, means, ratios, shares and quantiles (medians), or
    de-biased tables of answers randomized on the respondents' devices (kind: randomized, a
    local spec file; charged nothing); refuse if the scope's budget would be exceeded."""
    from dprelease.budget import load_privacy_profiles
    from dprelease.publish import (
        Options,
        decide_budget,
        prepare,
        publish,
        release_folder_problem,
    )
    from dprelease.spec import load_spec

    if (problem := release_folder_problem(out)) is not None:
        raise ConfigError("--out", problem)
    chosen_formats = None if formats is None else parse_formats(formats)
    resolved = load_spec(spec)
    chosen = None if epsilon is None else parse_epsilon(epsilon, "--epsilon")
    chosen_rho = None if rho is None else parse_epsilon(rho, "--rho", "ρ")
    stated_cap = None if cap is None else parse_epsilon(cap, "--cap", "the cap")
    privacy = None if config is None else load_privacy_profiles(config)

    def checks(existing: Ledger | None) -> tuple[Budget, PreparedRelease]:
        budget = decide_budget(
            resolved,
            scope=scope,
            privacy=privacy,
            ledger=existing,
            new_ledger=existing is None,
            epsilon=chosen,
            rho=chosen_rho,
            cap=stated_cap,
            options=Options(**CLI_WORDS_FOR_BUDGET),
            selection_delta=parse_delta(selection_delta),
        )
        return budget, prepare(data, resolved, budget, period=period, engine=engine)

    book, (budget, prepared) = ledger_after_checks(ledger_url, checks)
    err = Console(stderr=True, soft_wrap=True, highlight=False)
    if budget.stated_cap_ignored is not None and budget.cap is not None:
        measure = budget.required_loss().measure
        err.print(
            f"budget scope {budget.scope!r} keeps its cap {loss_text(measure, budget.cap)} from "
            f"the ledger (not --cap {typed_text(budget.stated_cap_ignored)}); `dprelease ledger "
            "set-cap` changes it"
        )
    with (
        book,
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
            ledger=book,
            out_dir=out,
            formats=chosen_formats,
            force_new=force_new,
            on_stage=lambda stage: progress.update(task, description=stage),
        )
        status = book.status(budget.scope)[0]
        if budget.new_scope and result.charged:  # made with this charge, and only now
            err.print(f"new budget scope {budget.scope!r}: {scope_text(status)}")
        if as_json:
            typer.echo(json.dumps(result.stored.manifest, sort_keys=True))
        else:
            _report(result, status)
