"""`dprelease ledger`: what each scope has spent, the history, an audit export, and the two
deliberate changes (set-cap, void). Reading commands never create or change a ledger."""

from __future__ import annotations

import json
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from dprelease.change import ProtectedChange
from dprelease.cli._app import app
from dprelease.cli._common import cli_errors, parse_epsilon, report_console
from dprelease.errors import ConfigError
from dprelease.loss import amount_text, loss_text

if TYPE_CHECKING:  # SQLAlchemy loads with the ledger, when a command opens one
    from dprelease.ledger import LedgerEvent, ScopeStatus

ledger_app = typer.Typer(
    help="Inspect the privacy-budget ledger (SQLite file or PostgreSQL); set caps, void.",
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

#: Events a person causes on purpose: the history shows who.
_BY_PERSON = {"scope_created", "cap_changed", "voided", "migrated"}


def _num(value: Fraction | None) -> str:
    """An amount as every face spells it: exact, with a short decimal beside a fraction."""
    return "" if value is None else amount_text(value)


def _print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=True))


def _start_report(
    records: Sequence[ScopeStatus] | Sequence[LedgerEvent], as_json: bool, heading: str, empty: str
) -> Console | None:
    """Begin a reading command's output the same way for every report: the records as JSON, or
    a console under `heading` (the ledger read) that prints `empty` when there are no records.
    None when the output is complete."""
    if as_json:
        _print_json([record.to_dict() for record in records])
        return None
    console = report_console()
    console.print(heading, soft_wrap=True)
    if not records:
        console.print(empty)
        return None
    return console


def _status_table(statuses: list[ScopeStatus]) -> Table:
    """One row per scope, its amounts in its own measure's unit (ε, or ρ for zCDP); what it
    keeps for life is said below the table (`_terms_lines`)."""
    table = Table(title="Privacy budget", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("scope", overflow="fold")
    table.add_column("unit", no_wrap=True)
    for column in ("cap", "spent", "left", "released", "open"):
        table.add_column(column, justify="right", no_wrap=True)
    for s in statuses:
        table.add_row(
            s.name,
            s.unit,
            _num(s.cap),
            _num(s.spent),
            _num(s.remaining),
            str(s.releases),
            str(s.open_reservations),
        )
    return table


def _neighbours_text(s: ScopeStatus) -> str:
    if s.neighbours is None:
        return "neighbours not fixed yet"
    if s.neighbours is ProtectedChange.ANSWER:
        return "local-DP waves: answer neighbours (who answered is public)"
    return f"{s.neighbours.value} neighbours"


def _terms_lines(statuses: list[ScopeStatus]) -> list[str]:
    """What each scope keeps for life, for zCDP what its cap and what it has spent imply as
    (ε, δ)-DP, and the key selection δ it keeps, has spent and has left."""
    lines = []
    for s in statuses:
        kept = [
            s.composition,
            _neighbours_text(s),
            f"privacy unit {s.privacy_unit}" if s.privacy_unit else "privacy unit not fixed yet",
        ]
        if s.composition == "parallel":
            column = s.period_column
            kept.append(f"months of column {column!r}" if column else "period column not fixed yet")
        if s.delta is not None:
            kept.append(
                f"zCDP read at δ = {s.delta:g}: cap {loss_text(s.measure, s.cap, s.delta)}, "
                f"spent {loss_text(s.measure, s.spent, s.delta)}"
            )
        if s.selection_delta is not None:
            worst = " (worst period)" if s.composition == "parallel" else ""
            kept.append(
                f"key selection δ budget {_num(s.selection_delta)}: spent "
                f"{_num(s.selection_delta_spent)}{worst}, left {_num(s.selection_delta_left)}"
            )
        lines.append(f"{s.name}: {'; '.join(kept)}")
    return lines


def _period_table(s: ScopeStatus) -> Table:
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("period")
    table.add_column("spent", justify="right")
    table.add_column("left", justify="right")
    for period, spent in s.periods.items():
        table.add_row(period or "-", _num(spent), _num(max(s.cap - spent, Fraction(0))))
    return table


@ledger_app.command("status")
@cli_errors
def status(ledger_url: LedgerOpt = None, scope: ScopeOpt = None, as_json: JsonOpt = False) -> None:
    """Cap, spent and remaining per scope, in its measure (ε, or ρ for zCDP), what each keeps
    for life, and the key selection δ spent and left (open reservations count as spent)."""
    from dprelease.ledger import Ledger

    with Ledger(ledger_url, mode="read") as ledger:
        statuses = ledger.status(scope)
    console = _start_report(
        statuses, as_json, f"ledger: {ledger.display_url}", "no budget scopes yet"
    )
    if console is None:
        return
    console.print(_status_table(statuses))
    for line in _terms_lines(statuses):
        console.print(line)
    if any(s.open_reservations for s in statuses):
        console.print(
            "open: reserved, never committed; counted as spent until committed or voided "
            "(`dprelease ledger void RELEASE_ID --reason TEXT`)\n"
        )
    for s in statuses:
        if s.composition == "parallel" and s.periods:
            console.print(f"{s.name}: every period has the full cap {s.unit} = {_num(s.cap)}")
            console.print(_period_table(s))


def _history_table(scope: str, events: list[LedgerEvent]) -> Table:
    """Two lines per event (when / what / ε, then the release and the details), so the table
    reads at 80 columns. A release id is shown whole, folded onto more lines if it is longer
    than its column: cut, two ids of the same long asset would look alike."""
    table = Table(title=f"scope {scope}", title_justify="left", box=box.SIMPLE_HEAD, leading=1)
    table.add_column("when (UTC)", no_wrap=True)
    table.add_column("event", no_wrap=True)
    table.add_column("release · details", overflow="fold", ratio=1)  # the rest of a terminal
    for e in events:
        details = [e.detail or ""]
        if e.run_id:
            details.append(f"run {e.run_id}")
        if e.kind in _BY_PERSON:
            details.append(f"by {e.actor}")
        table.add_row(
            f"{e.at:%Y-%m-%d}\n{e.at:%H:%M:%S}",
            e.kind + ("" if e.epsilon is None else f"\n{e.unit} = {_num(e.epsilon)}"),
            (e.release_id + "\n" if e.release_id else "") + " · ".join(d for d in details if d),
        )
    return table


@ledger_app.command("history")
@cli_errors
def history(ledger_url: LedgerOpt = None, scope: ScopeOpt = None, as_json: JsonOpt = False) -> None:
    """Every reservation, commit, re-use, void and cap change, oldest first (nothing is deleted)."""
    from dprelease.ledger import Ledger

    with Ledger(ledger_url, mode="read") as ledger:
        if scope is not None:
            ledger.status(scope)  # UnknownScope (exit 2) rather than an empty history
        events = ledger.history(scope)
    console = _start_report(
        events, as_json, f"ledger history: {ledger.display_url}", "no events yet"
    )
    if console is None:
        return
    for name in dict.fromkeys(e.scope for e in events):
        console.print(_history_table(name, [e for e in events if e.scope == name]))


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
    from dprelease.files import atomic_path, replaceable_target

    if output is not None:
        replaceable_target(output, "--output")  # refused before the ledger is even opened
    from dprelease.ledger import Ledger

    with Ledger(ledger_url, mode="read") as ledger:
        dump = ledger.export(scope, include_tables=tables)
    text = json.dumps(dump, indent=2, sort_keys=True)
    if output is None:
        typer.echo(text)
        return
    try:
        with atomic_path(output, "--output") as temporary:
            temporary.write_text(text + "\n")
    except OSError as exc:  # a full disk, a directory that cannot be made: the old file is kept
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(
            "--output", f"cannot write {output}: {reason}; nothing was written"
        ) from None
    typer.echo(f"wrote {output}", err=True)


@ledger_app.command("set-cap")
@cli_errors
def set_cap(
    scope: Annotated[str, typer.Argument(help="The budget scope to change.")],
    cap: Annotated[
        str,
        typer.Argument(help="New cap, in the scope's unit (ε, or ρ for zCDP), e.g. 0.3466 or 1/3."),
    ],
    reason: Annotated[
        str | None, typer.Option("--reason", help="Why (recorded in the history).")
    ] = None,
    ledger_url: LedgerOpt = None,
) -> None:
    """Change a scope's cap on purpose; the old and new cap are recorded in the history."""
    from dprelease.ledger import Ledger

    exact = parse_epsilon(cap, "CAP", "the cap")
    with Ledger(ledger_url, mode="existing") as ledger:
        new = ledger.set_cap(scope, exact, reason=reason)
    typer.echo(
        f"scope {new.name}: cap {loss_text(new.measure, new.cap, new.delta)}, spent "
        f"{_num(new.spent)}, remaining {_num(new.remaining)}"
    )


@ledger_app.command("void")
@cli_errors
def void(
    release_id: Annotated[str, typer.Argument(help="The release id (asset/period) to end.")],
    reason: Annotated[
        str, typer.Option("--reason", help="Why it is safe to end (recorded with who did it).")
    ],
    ledger_url: LedgerOpt = None,
) -> None:
    """End an open reservation (a run that died before committing): its ε (or ρ) is spent no
    more.

    Only open reservations published nothing; a committed release can never be voided.
    """
    from dprelease.ledger import Ledger

    with Ledger(ledger_url, mode="existing") as ledger:
        voided = ledger.void(release_id, reason=reason)
        after = ledger.status(voided.scope)[0]
    typer.echo(
        f"voided the open reservation of {voided.release_id} ({after.unit} = "
        f"{_num(voided.epsilon)} returned); scope {voided.scope} has {after.unit} = "
        f"{_num(after.remaining)} of its cap {after.unit} = {_num(after.cap)} left"
    )


@ledger_app.command("upgrade")
@cli_errors
def upgrade(ledger_url: LedgerOpt = None) -> None:
    """Bring an existing ledger's schema to this dprelease's version (releases do it too)."""
    from dprelease.ledger import Ledger

    with Ledger(ledger_url, mode="existing") as ledger:
        before, after = ledger.upgraded_from, ledger.schema_version
    typer.echo(
        f"ledger {ledger.display_url}: schema version {before} -> {after}"
        if before != after
        else f"ledger {ledger.display_url}: schema version {after}, up to date"
    )
