"""A plan as a person reads it in a notebook or a REPL: `print(dp.plan(...))` and Jupyter's
rich display show what the release will spend and state per statistic, not the raw model (its
fields stay the stable JSON of `dprelease plan --json`)."""

from __future__ import annotations

import html
from fractions import Fraction
from typing import TYPE_CHECKING

from dprelease.loss import Measure, amount_text, loss_text

if TYPE_CHECKING:
    from dprelease.statement._planner import ReleasePlan, StatisticAccuracy

#: The columns of a plan's table: one row per statistic (a quantile: one per p).
COLUMNS = ("statistic", "kind", "{symbol}", "Δ", "scale", "±95%", "target")


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.4g}"


def _spent(row: StatisticAccuracy) -> str:
    return _num(row.epsilon if row.rho is None else row.rho)


def _rows(row: StatisticAccuracy) -> list[tuple[str, ...]]:
    """A statistic's rows: its spend, Δ, scale and margin; a mean's margin is per cell, and a
    quantile states each p's 95% error in ranks instead."""
    target = "" if row.target_moe95 is None else _num(row.target_moe95)
    if row.target_met is not None:
        target += " ok" if row.target_met else " MISSED"
    if row.quantiles:
        first = (row.name, row.kind, _spent(row), f"{_num(row.sensitivity)} ranks", "–")
        return [
            (*(first if i == 0 else ("",) * 5), f"p = {q.p:g}: {_num(q.rank_error95)} ranks", "")
            for i, q in enumerate(row.quantiles)
        ]
    moe = "per cell" if row.moe95 is None else _num(row.moe95)
    return [(row.name, row.kind, _spent(row), _num(row.sensitivity), _num(row.scale), moe, target)]


def _header(plan: ReleasePlan) -> str:
    if plan.rho_total_exact is not None:
        spends = f"{loss_text(Measure.ZCDP, Fraction(plan.rho_total_exact))} (zCDP)"
    elif plan.epsilon_total_exact is not None:
        spends = loss_text(Measure.PURE, Fraction(plan.epsilon_total_exact))
    else:
        spends = "no ε or ρ given"
    return (
        f"release {plan.release!r} at {spends}: {plan.mechanism.value} noise, split by "
        f"{plan.budget_split}, {plan.neighbours.value} neighbours"
    )


def _footer(plan: ReleasePlan) -> list[str]:
    lines = []
    if plan.epsilon_for_targets_exact is not None:
        smallest = amount_text(Fraction(plan.epsilon_for_targets_exact))
        lines.append(f"smallest {plan.measure.symbol} meeting every target: {smallest}")
    if plan.comparison is not None:
        lines.append(f"pure ε or zCDP: smaller margins: {plan.comparison.smaller}")
    return lines


def _table(plan: ReleasePlan) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    head = tuple(c.format(symbol=plan.measure.symbol) for c in COLUMNS)
    return head, [cells for row in plan.statistics for cells in _rows(row)]


def plan_text(plan: ReleasePlan) -> str:
    """The plan in plain text: a header line, one aligned row per statistic (or p), and the
    smallest loss for the targets when there are targets."""
    head, rows = _table(plan)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = [
        "  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in
                  enumerate(zip(cells, widths, strict=True))).rstrip()  # fmt: skip
        for cells in [head, *rows]
    ]
    return "\n".join([_header(plan), *lines, *_footer(plan)])


def plan_html(plan: ReleasePlan) -> str:
    """The plan as HTML for a notebook: the same header, table and footer, escaped."""
    head, rows = _table(plan)
    cells = "".join(f"<th>{html.escape(c)}</th>" for c in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows
    )
    notes = "".join(f"<p>{html.escape(line)}</p>" for line in _footer(plan))
    return (
        f"<p>{html.escape(_header(plan))}</p>"
        f"<table><thead><tr>{cells}</tr></thead><tbody>{body}</tbody></table>{notes}"
    )
