"""Reliability rules: flags and suppression, decided from the released values alone.

`evaluate` is a pure function of the released table (each value, its margins of error) and the
public rules: a row's flags depend on that row's released values and nothing else, so whatever
is not released cannot change one (tests/unit/test_publication_rules.py checks it over random
tables). Every rule reads the table as released, before any suppression, so their order does not
matter. Rows of margins are judged like cells.

Flags follow Eurostat's observation status (`u`, low reliability); a suppressed value is left
blank with its margins and keeps its flag (Eurostat's ": u"). Suppression here is about
reliability: the noise protects every value, and a suppressed cell found again from its margin
is just as unreliable as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from dprelease.publication._columns import ValueColumn
from dprelease.spec import LOW_RELIABILITY, ReleaseSpec, Rule, rule_statistics, tested_columns


@dataclass(frozen=True)
class JudgedRule:
    """A rule with the value columns it tests (resolved from the spec) and its name."""

    name: str
    rule: Rule
    tested: tuple[str, ...]  # value columns


def judged_rules(spec: ReleaseSpec) -> list[JudgedRule]:
    """The spec's rules, each named (default rule_1, rule_2, …) with the value columns it
    tests."""
    stats = {s.name: s for s in spec.statistics}
    return [
        JudgedRule(
            rule.name or f"rule_{index + 1}",
            rule,
            tuple(
                column
                for name in rule_statistics(spec, rule)
                for column in tested_columns(stats[name], rule)
            ),
        )
        for index, rule in enumerate(spec.postprocess.rules or [])
    ]


@dataclass(frozen=True)
class Evaluated:
    """The table with its flag columns and suppressions, and per rule the rows where its test
    held and the values it flagged or suppressed (counts of noisy values: public)."""

    table: pl.DataFrame
    rows: tuple[int, ...]
    values: tuple[int, ...]


def _released(table: pl.DataFrame, name: str | None) -> np.ndarray | None:
    if name is None or name not in table.columns:
        return None
    return table.get_column(name).cast(pl.Float64).fill_null(np.nan).to_numpy()


def margin_of(table: pl.DataFrame, column: ValueColumn) -> np.ndarray:
    """The released margin a rule reads: the combined one where the statistic has it, else the
    noise's; a quantile's, the farther end of its interval (NaN where none is released)."""
    value = _released(table, column.column)
    assert value is not None
    low, high = _released(table, column.low), _released(table, column.high)
    if low is not None and high is not None:
        return np.fmax(value - low, high - value)
    margin = _released(table, column.combined)
    if margin is None:
        margin = _released(table, column.moe)
    return margin if margin is not None else np.full(value.shape, np.nan)


def test_holds(table: pl.DataFrame, column: ValueColumn, rule: Rule) -> np.ndarray:
    """Where the rule's test holds for one value column (never where the value is blank)."""
    value = _released(table, column.column)
    assert value is not None
    with np.errstate(invalid="ignore"):
        if rule.value_below is not None:
            return value < rule.value_below
        assert rule.relative_margin_above is not None
        margin = margin_of(table, column)
        return margin > rule.relative_margin_above * np.abs(value)


def evaluate(
    table: pl.DataFrame, columns: Sequence[ValueColumn], rules: Sequence[JudgedRule]
) -> Evaluated:
    """Flag (`u`) or suppress the values the rules single out; a `<value>_flag` column after
    each value's own columns. Reads only `table`'s released columns."""
    by_name = {c.column: c for c in columns}
    height = table.height
    flagged = {c.column: np.zeros(height, dtype=bool) for c in columns}
    suppressed = {c.column: np.zeros(height, dtype=bool) for c in columns}
    rows, values = [], []
    for judged in rules:
        holds = {name: test_holds(table, by_name[name], judged.rule) for name in judged.tested}
        hit = np.logical_or.reduce(list(holds.values()))
        targets = {c.column: hit for c in columns} if judged.rule.apply_to == "row" else holds
        into = suppressed if judged.rule.action == "suppress" else flagged
        for name, where in targets.items():
            into[name] |= where
        rows.append(int(hit.sum()))
        values.append(int(sum(int(where.sum()) for where in targets.values())))
    out = table.clone()  # insert_column works in place: never on the caller's table
    for column in columns:
        gone = suppressed[column.column]
        if gone.any():
            blanked = [column.column, *(m for m in column.margins if m in out.columns)]
            out = out.with_columns(
                pl.when(pl.Series(gone)).then(None).otherwise(pl.col(name)).alias(name)
                for name in blanked
            )
        marked = flagged[column.column] | gone
        flag = [LOW_RELIABILITY if hit else None for hit in marked.tolist()]
        own = [c for c in (column.column, *column.margins) if c in out.columns]
        last = max(out.columns.index(c) for c in own)
        out = out.insert_column(last + 1, pl.Series(column.flag, flag, dtype=pl.String))
    return Evaluated(out, tuple(rows), tuple(values))
