"""A drawn release finished for publication: sampling margins, then the rounding base, then the
reliability rules, each a function of the released table and public inputs, and what the
manifest says of them.

`finish` runs once, when a release is drawn (before the ledger stores it), so the ledger's copy,
every file written from it and every re-run agree. A spec without publication options leaves the
table and the manifest exactly as they were.
"""

from __future__ import annotations

import polars as pl

from dprelease.mechanism.noise import NoiseSource, UniformIntegers
from dprelease.publication._columns import ValueColumn, value_columns
from dprelease.publication._rounding import round_to_base
from dprelease.publication._rules import evaluate, judged_rules
from dprelease.publication._sampling import combined_margins
from dprelease.spec import ResolvedSpec, rule_statistics
from dprelease.statement import (
    FLAG_CODES,
    Manifest,
    PublicationEntry,
    RoundingEntry,
    RuleEntry,
)

ROUNDING_METHOD = (
    "unbiased controlled rounding (Cox 1987): each value to an adjacent multiple of the base, "
    "up with the probability that keeps its expectation; with margins a walk on the table's "
    "cycles keeps every released margin the sum of its rounded cells; coins from the release's "
    "noise source"
)


def finish(
    table: pl.DataFrame, manifest: Manifest, resolved: ResolvedSpec, source: NoiseSource
) -> tuple[pl.DataFrame, Manifest]:
    """The released table and manifest after the spec's publication options (unchanged without
    any). Reads only the table, the spec and, for the rounding's coins, the noise source."""
    spec = resolved.spec
    post = spec.postprocess
    if not (post.rules or post.round_to or spec.sampling):
        return table, manifest
    columns = value_columns(spec)
    table, sampling = combined_margins(table, columns, spec, resolved.standard_errors)
    rounding = None
    if post.round_to is not None:
        table, rounding = _rounded(table, columns, post.round_to, resolved, source)
    rules: list[RuleEntry] = []
    if post.rules:
        judged = judged_rules(spec)
        evaluated = evaluate(table, columns, judged)
        table = evaluated.table
        rules = [
            RuleEntry(
                name=j.name,
                test=j.rule.test,
                statistics=rule_statistics(spec, j.rule),
                action=j.rule.action,
                apply_to=j.rule.apply_to,
                rows=rows,
                values=values,
            )
            for j, rows, values in zip(judged, evaluated.rows, evaluated.values, strict=True)
        ]
    entry = PublicationEntry(
        flags=dict(FLAG_CODES) if post.rules else {},
        sampling=sampling,
        rounding=rounding,
        rules=rules,
    )
    return table, manifest.model_copy(update={"publication": entry})


def _rounded(
    table: pl.DataFrame,
    columns: list[ValueColumn],
    base: int,
    resolved: ResolvedSpec,
    source: NoiseSource,
) -> tuple[pl.DataFrame, RoundingEntry]:
    """Every count and sum to multiples of `base`; their margins widened by the most a value of
    theirs may move (base − 1 for counts of rows; nothing where every value was a multiple)."""
    uniform = UniformIntegers(source)
    additive = True
    rounded = [c for c in columns if c.rounds]
    moved = []
    for column in rounded:
        series = table.get_column(column.column)
        result = round_to_base(series.to_list(), base, resolved.levels, uniform)
        additive &= result.additive
        values = [int(v) if column.counts_rows else float(v) for v in result.values]
        widen = int(result.max_move) if column.counts_rows else float(result.max_move)
        moved.append(f"{column.statistic} +{format(result.max_move, 'f')}")
        updates: list[pl.Series | pl.Expr] = [pl.Series(column.column, values, dtype=series.dtype)]
        for margin in (column.moe, column.combined):
            if margin is not None and margin in table.columns:
                updates.append((pl.col(margin) + widen).alias(margin))
        table = table.with_columns(updates)
    entry = RoundingEntry(
        base=base,
        statistics=[c.statistic for c in rounded],
        method=ROUNDING_METHOD,
        additive=additive,
        margin_of_error=(
            f"a value moves by less than {base}: by at most {base} − g, g the greatest common "
            "divisor of the base and the statistic's released values; its _moe95 (and "
            f"_moe95_combined) columns add that ({', '.join(moved)}), so the 95% statements "
            "carry over; the statistics' moe95 above are before this rounding"
        ),
    )
    return table, entry
