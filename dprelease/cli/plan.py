"""`dprelease plan`: what a release of a spec states at an ε, and the smallest ε for target
margins of error, before any data is read or any budget spent."""

from __future__ import annotations

from fractions import Fraction
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
    SelectionDeltaOption,
    SpecOption,
    cli_errors,
    open_existing_ledger,
    parse_delta,
    parse_epsilon,
)
from dprelease.errors import ConfigError
from dprelease.loss import Measure, amount_text, decimal_text, loss_text

if TYPE_CHECKING:
    from dprelease.mechanism.selection import SelectionReport
    from dprelease.statement import (
        LevelAccuracy,
        MeasureComparison,
        MeasurementAccuracy,
        MoeRange,
        PublicationPlan,
        ReleasePlan,
        StatisticAccuracy,
    )


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


def _range(moe: float | MoeRange) -> str:
    return _num(moe) if isinstance(moe, float) else f"{_num(moe.min)}–{_num(moe.max)}"


def _spent(noise: StatisticAccuracy | MeasurementAccuracy | LevelAccuracy) -> str:
    """What a noise spends in the plan's measure: ε, or ρ under zCDP."""
    return _num(noise.epsilon if noise.rho is None else noise.rho)


#: One row of the plan's table: statistic, kind, level, ε (or ρ), Δ, scale, ±95%, target.
Row = tuple[str, str, str, str, str, str, str, str]


def _noise_rows(
    name: str, kind: str, noise: StatisticAccuracy | MeasurementAccuracy, target: str
) -> list[Row]:
    """One row per noisy vector: the cells without margins, else every level; ε (or ρ), Δ and
    the scale on a row are that one noise's, so scale = Δ/ε there (up to the sampler's rounding
    up; Gaussian: σ = Δ2/√(2ρ))."""
    if noise.levels is None:
        moe = "per cell" if noise.moe95 is None else _num(noise.moe95)
        return [(name, kind, "", _spent(noise), _num(noise.sensitivity),
                 _num(noise.scale), moe, target)]  # fmt: skip
    return [
        (
            name if k == 0 else "",
            kind if k == 0 else "",
            level.level,
            _spent(level),
            _num(level.sensitivity),
            _num(level.scale),
            _range(level.moe95),
            target if k == 0 else "",
        )
        for k, level in enumerate(noise.levels)
    ]


def _statistic_rows(row: StatisticAccuracy) -> list[Row]:
    """A count or sum: its noise (per level, then what it spends over all levels). A ratio of
    two noisy vectors (a mean, a share, a ratio): what it spends and that its margin is per
    cell, then each measurement it makes itself (what it reuses is named below the table)."""
    target = "" if row.target_moe95 is None else _num(row.target_moe95)
    if row.target_met is not None:
        target += " ok" if row.target_met else " MISSED"
    if row.quantiles:  # errors in ranks (weighted: in weight), per p: in the quantiles' table
        unit = row.rank_unit
        return [(row.name, row.kind, "", _spent(row), f"{_num(row.sensitivity)} {unit}", "–",
                 f"{unit} ↓", "")]  # fmt: skip
    if not (row.reuses or row.measurements):  # one noisy vector of its own
        rows = _noise_rows(row.name, row.kind, row, target)
        if row.levels is not None:
            rows.append(("", "", "all levels", _spent(row), "", "", "", ""))
        return rows
    rows = [(row.name, row.kind, "", _spent(row), "", "", "per cell", "")]
    for own in row.measurements:
        rows += _noise_rows("", f"  its {own.kind}", own, "")
    return rows


def _table(planned: ReleasePlan) -> Table:
    """Every noise the release adds, one per row (with margins one per level), so each row's
    scale is its own noise's; a statistic's ε (or ρ) over all its levels on a row of its own."""
    symbol = planned.measure.symbol
    margins = any(row.levels is not None for row in planned.statistics)
    title = f"{symbol}, Δ, noise scale and 95% margins of error per level" if margins else None
    table = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left")
    table.add_column("statistic", overflow="fold")
    table.add_column("kind", no_wrap=True)
    if margins:
        table.add_column("level", no_wrap=True)
    for column in (symbol, "Δ", "scale", "±95%", "target"):
        table.add_column(column, justify="right", no_wrap=True)
    for row in planned.statistics:
        for cells in _statistic_rows(row):
            table.add_row(*(cells if margins else cells[:2] + cells[3:]))
        if margins:
            table.add_section()
    return table


#: The quantiles table's title by the units its rows are in: ranks of rows, or weight mass.
_QUANTILE_TITLES = {
    frozenset({"ranks"}): "quantiles: 95% errors in ranks",
    frozenset({"weight"}): "quantiles: 95% errors in weight (Σ w of the survey weight)",
    frozenset({"ranks", "weight"}): "quantiles: 95% errors in ranks, or in weight (Σ w) where "
    "survey-weighted",
}


def _quantiles_table(planned: ReleasePlan) -> Table | None:
    """Quantile statistics: each p's 95% rank error and interval half-width (data-free), in
    ranks, or in weight for a survey-weighted quantile (each number says which)."""
    rows = [(row, q) for row in planned.statistics for q in row.quantiles or []]
    if not rows:
        return None
    units = frozenset(row.rank_unit for row, _ in rows)
    table = Table(box=box.SIMPLE_HEAD, title=_QUANTILE_TITLES[units], title_justify="left")
    for column in ("statistic", "column", "p"):
        table.add_column(column, overflow="fold")
    for column in ("error", "interval ±"):
        table.add_column(column, justify="right", no_wrap=True)
    for row, q in rows:
        unit = row.rank_unit
        table.add_row(
            row.name,
            q.column,
            f"{q.p:g}",
            f"{_num(q.rank_error95)} {unit}",
            f"{_num(q.interval_rank_halfwidth95)} {unit}",
        )
    return table


#: A share's fraction longer than this is written as the cap over the number of releases.
_SHORT_FRACTION = 12


def share_text(symbol: str, cap: Fraction, releases: int) -> str:
    """One of `releases` equal shares of `cap`, exactly and briefly: `ε = 0.15`, `ε = 1/3 ≈
    0.333`, or, when the share is a long fraction (a cap of 0.001425276394 in three), `ρ =
    0.001425276394/3 ≈ 0.000475`."""
    share = cap / releases
    if releases == 1 or len(str(share)) <= _SHORT_FRACTION or "≈" not in amount_text(share):
        return f"{symbol} = {amount_text(share)}"
    return f"{symbol} = {amount_text(cap)}/{releases} ≈ {decimal_text(share, 3)}"


def _publication_table(publication: PublicationPlan) -> Table:
    """Per value column: its margin after the rounding base, and per rule where its test holds
    on the released value and the truth from which a cell passes it (≥ 97.5%)."""
    base = "" if publication.round_to is None else f", rounding to base {publication.round_to}"
    table = Table(
        box=box.SIMPLE_HEAD,
        title=f"publication (no ε): reliability rules{base}; a test holds where the released "
        "value is below, and a cell passes it with probability ≥ 97.5% once its truth is at "
        "least",
        title_justify="left",
    )
    table.add_column("value", overflow="fold")
    for column in ("±95%", "±95% rounded"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("rule", overflow="fold")
    for column in ("released <", "truth ≥"):
        table.add_column(column, justify="right", no_wrap=True)
    for value in publication.values:
        first = (value.column, _num(value.moe95), _num(value.moe95_rounded))
        if not value.tests:
            table.add_row(*first, "", "", "")
        for k, test in enumerate(value.tests):
            below = "per cell" if test.released_below is None else _num(test.released_below)
            truth = "per cell" if test.truth_from is None else _num(test.truth_from)
            rule = f"{test.rule}: {test.action}" + (" row" if test.apply_to == "row" else "")
            table.add_row(*(first if k == 0 else ("", "", "")), rule, below, truth)
    return table


def _comparison_table(comparison: MeasureComparison) -> Table:
    """Margins under pure ε (Laplace) and zCDP (Gaussian) at the same odds profile."""
    pure = share_text("ε", Fraction(comparison.epsilon_cap_exact), comparison.releases)
    zcdp = share_text("ρ", Fraction(comparison.rho_cap_exact), comparison.releases)
    table = Table(
        box=box.SIMPLE_HEAD,
        title=f"pure ε or zCDP? as one of {comparison.releases} release(s) of the scope: "
        f"{pure} (Laplace) or {zcdp} (Gaussian, odds statement with probability ≥ 1 − "
        f"{comparison.delta:g})",
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
    if planned.rho_total_exact is not None:
        spends = f"{loss_text(Measure.ZCDP, Fraction(planned.rho_total_exact))} (zCDP)"
    else:
        spends = loss_text(Measure.PURE, Fraction(planned.epsilon_total_exact or 0))
    console.print(
        f"release {planned.release!r} at {spends}, {planned.mechanism.value} noise, split by "
        f"{planned.budget_split}, {planned.neighbours.value} neighbours"
    )
    console.print(_table(planned))
    if (quantiles := _quantiles_table(planned)) is not None:
        console.print(quantiles)
    for row in planned.statistics:
        how = f"reuses {', '.join(row.reuses)}; " if row.reuses else ""
        console.print(f"{row.name}: {how}{row.derivation}", markup=False)
        if row.error_in_units is not None:
            console.print(f"{row.name}, error {row.error_in_units}", markup=False)
    if planned.publication is not None:
        console.print(_publication_table(planned.publication))
    if planned.epsilon_for_targets is not None:
        smallest = Fraction(planned.epsilon_for_targets_exact or 0)
        console.print(
            f"smallest {planned.measure.symbol} meeting every target: {amount_text(smallest)}"
        )
    if planned.comparison is not None:
        console.print(_comparison_table(planned.comparison))
        console.print(f"smaller margins: {planned.comparison.smaller}")
    for report in planned.selections or []:
        _print_selection(console, report)


def _print_selection(console: Console, report: SelectionReport) -> None:
    """A key selection's plan: its rule, share, δ, τ and the keep probabilities (no data)."""
    entry = report.entry
    share = f"ρ = {entry.rho:g}" if entry.rho is not None else f"ε = {entry.epsilon:g}"
    console.print(
        f"keys of {', '.join(entry.columns)} selected from the data: {entry.mechanism} "
        f"({entry.policy}, ≤ {entry.max_keys_per_unit} key(s) per unit), {share}, δ spent = "
        f"{entry.delta_spent:g} of the scope's selection δ = {report.scope_delta:g}; τ = "
        f"{entry.tau} units (kept with probability ≥ 1/2)",
        markup=False,
    )
    console.print(
        f"rule {entry.mechanism} ({entry.rule_chosen_by}): {entry.rule_reason}", markup=False
    )
    console.print(
        f"selection δ of the scope: {report.delta_spent_before:g} spent before, "
        f"{entry.delta_spent:g} by this release, {report.delta_left:g} left after it",
        markup=False,
    )
    keep = ", ".join(f"{row.units}: {row.probability:.3g}" for row in report.keep)
    console.print(f"probability a key held by n units is released: {keep}", markup=False)
    console.print(entry.keys, markup=False)


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
    selection_delta: SelectionDeltaOption = None,
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
    chosen_rho = None if rho is None else parse_epsilon(rho, "--rho", "ρ")
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
            selection_delta=parse_delta(selection_delta),
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
