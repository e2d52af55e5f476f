"""`dprelease ledger`: what each scope has spent, the full history, and a JSON export for audits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from dprelease.cli._app import app
from dprelease.cli._common import cli_errors
from dprelease.ledger import Ledger, ScopeStatus

ledger_app = typer.Typer(
    help="Inspect the privacy-budget ledger (SQLite file or PostgreSQL).",
    no_args_is_help=True,
)
app.add_typer(ledger_app, name="ledger")

LedgerOpt = Annotated[
    str | None,
    typer.Option(
        "--ledger",
        help="Ledger URL or SQLite path (default: $DPRELEASE_LEDGER_URL, "
        "else .dprelease/ledger.sqlite).",
    ),
]
ScopeOpt = Annotated[str | None, typer.Option("--scope", help="Only this budget scope.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _num(value: Any) -> str:
    return "" if value is None else f"{float(value):.6g}"


def _print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=True))


def _status_tables(statuses: list[ScopeStatus], ledger: Ledger) -> list[Table]:
    table = Table(title=f"Privacy budget: {ledger.display_url}")
    for column in (
        "scope",
        "composition",
        "cap ε",
        "spent ε",
        "remaining ε",
        "releases",
        "open reservations",
    ):
        table.add_column(column, justify="left" if column in ("scope", "composition") else "right")
    for s in statuses:
        table.add_row(
            s.name,
            s.composition,
            _num(s.cap),
            _num(s.spent),
            _num(s.remaining),
            str(s.releases),
            str(s.open_reservations),
        )
    tables = [table]
    for s in statuses:
        if s.composition == "parallel" and s.periods:
            per = Table(title=f"{s.name}: each period has the full cap {_num(s.cap)}")
            per.add_column("period")
            per.add_column("spent ε", justify="right")
            per.add_column("remaining ε", justify="right")
            for period, spent in s.periods.items():
                per.add_row(period or "-", _num(spent), _num(max(s.cap - spent, 0)))
            tables.append(per)
    return tables


@ledger_app.command("status")
@cli_errors
def status(ledger_url: LedgerOpt = None, scope: ScopeOpt = None, as_json: JsonOpt = False) -> None:
    """Cap, spent and remaining ε per scope (open reservations count as spent)."""
    ledger = Ledger(ledger_url)
    statuses = ledger.status(scope)
    if as_json:
        _print_json([s.to_dict() for s in statuses])
        return
    if not statuses:
        typer.echo(f"no budget scopes yet in {ledger.display_url}")
        return
    console = Console()
    for table in _status_tables(statuses, ledger):
        console.print(table)


@ledger_app.command("history")
@cli_errors
def history(ledger_url: LedgerOpt = None, scope: ScopeOpt = None, as_json: JsonOpt = False) -> None:
    """Every reservation, commit, re-use and cap change, oldest first (nothing is deleted)."""
    ledger = Ledger(ledger_url)
    events = ledger.history(scope)
    if as_json:
        _print_json([e.to_dict() for e in events])
        return
    table = Table(title=f"Ledger history: {ledger.display_url}")
    table.add_column("time (UTC)", no_wrap=True)
    table.add_column("event", no_wrap=True)
    table.add_column("scope")
    table.add_column("release id", overflow="fold")
    table.add_column("period")
    table.add_column("ε", justify="right", no_wrap=True)
    table.add_column("charge", justify="right")
    table.add_column("status")
    table.add_column("run id", overflow="fold")
    for e in events:
        table.add_row(
            e.at.strftime("%Y-%m-%d %H:%M:%S"),
            e.kind,
            e.scope,
            e.release_id or "",
            e.period or "",
            _num(e.epsilon),
            "" if e.charge_id is None else str(e.charge_id),
            e.status or "",
            e.run_id or "",
        )
    Console().print(table)


@ledger_app.command("export")
@cli_errors
def export(
    ledger_url: LedgerOpt = None,
    scope: ScopeOpt = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Accepted for symmetry: the export is always JSON.")
    ] = True,
    tables: Annotated[
        bool, typer.Option("--tables", help="Include the stored tables (base64 parquet).")
    ] = False,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file, not stdout.")
    ] = None,
) -> None:
    """Dump scopes, charges, releases (manifests, table sha256) and events as JSON."""
    dump = Ledger(ledger_url).export(scope, include_tables=tables)
    text = json.dumps(dump, indent=2, sort_keys=True)
    if output is None:
        typer.echo(text)
    else:
        output.write_text(text + "\n")
        typer.echo(f"wrote {output}", err=True)


@ledger_app.command("set-cap")
@cli_errors
def set_cap(
    scope: Annotated[str, typer.Argument(help="The budget scope to change.")],
    cap: Annotated[str, typer.Argument(help="New cap, e.g. 0.3466 or 1/3.")],
    reason: Annotated[
        str | None, typer.Option("--reason", help="Why (recorded in the history).")
    ] = None,
    ledger_url: LedgerOpt = None,
) -> None:
    """Change a scope's cap on purpose; the old and new cap are recorded in the history."""
    new = Ledger(ledger_url).set_cap(scope, cap, reason=reason)
    typer.echo(
        f"scope {new.name}: cap {_num(new.cap)}, spent {_num(new.spent)}, "
        f"remaining {_num(new.remaining)}"
    )
