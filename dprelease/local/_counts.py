"""Per cell of the public key grid: how many respondents answered, and how many reports support
each answer. The polars engine is here, the Spark engine in `_spark`; both count the same.

A report *supports* answer v (index j) when: k-RR's report is v; OUE's j-th character is 1; OLH's
hash with the report's seeds maps j to its bucket. A missing report (null) is a respondent who
did not answer: not counted. A report that is not one a randomizer of this wave can give (an
answer outside the domain, a bit string of the wrong length, seeds out of range) is refused:
it is not randomized, or not by this wave's questionnaire (`MalformedReports`).

Rows whose keys are outside the public domains are dropped, as in a central release; keys are
typed exactly as the central engines type them (`_adapter`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from dprelease import operator
from dprelease.errors import DataError, SchemaError
from dprelease.local._adapter import (
    DataSource,
    Declared,
    declared,
    key_plan,
    polars_key,
    scan,
    validate_schema,
    withholding_engine_errors,
)
from dprelease.mechanism.randomized import PRIME, Randomizer
from dprelease.spec import ResolvedSpec

_CELL = ":cell"
_REPORT = ":report"
_BAD = ":malformed"
_INDEX = ":index"
_HASH = ":hash"
_STALE = ":stale"
#: Where a wave's question (the column of randomized answers) is declared.
QUESTION_PATH = "wave.question"
#: Where the column of each report's configuration hash is declared.
HASH_PATH = "release.hash_column"


@dataclass(frozen=True)
class CellCounts:
    """Per cell (rows of the key grid, in order): respondents n and support counts (cells × k)."""

    respondents: np.ndarray
    support: np.ndarray


class MalformedReports(DataError):
    """Reports that no randomizer of the wave gives: refused, never counted or dropped."""


def malformed(column: str, randomizer: Randomizer, bad: int) -> MalformedReports:
    """The refusal (no value, no count: a malformed report may be an answer that was never
    randomized); the operator channel gets the count."""
    operator.warn(
        f"column {column!r}: {bad} report(s) are not {randomizer.mechanism} reports of this wave"
    )
    return MalformedReports(
        f"column {column!r} holds reports that are not {randomizer.mechanism} reports of this "
        f"wave ({describe_reports(randomizer)}); a malformed report may be an answer that was "
        "never randomized, so nothing was released. Check that the answers come from this "
        "wave's questionnaire (the operator log says how many)"
    )


@dataclass(frozen=True)
class ReportColumns:
    """Where a wave's reports arrive: the answers' column (`question`), and the column of each
    report's `wave_hash`, which must be the wave's (`expected`)."""

    question: str
    hash_column: str
    expected: str


class ReportsOfAnotherConfiguration(DataError):
    """Reports whose page was configured otherwise than the recorded wave (or says nothing)."""


def another_configuration(columns: ReportColumns, stale: int) -> ReportsOfAnotherConfiguration:
    """The refusal (no value, no count; the operator channel gets the count): such reports may
    have been made at another ε, so neither the charge nor the estimator is theirs."""
    operator.warn(
        f"column {columns.hash_column!r}: {stale} report(s) carry no or another wave_hash"
    )
    return ReportsOfAnotherConfiguration(
        f"column {columns.hash_column!r} holds reports made under another questionnaire "
        f"configuration than wave_hash {columns.expected[:12]}… (or none), so nothing was "
        "released: they may have another ε than the wave's charge. Serve the configuration "
        "`dprelease local wave` printed, and remove those reports by their submission "
        "metadata (the operator log says how many)"
    )


def check_hash_column(schema: pl.Schema, column: str, untyped: bool) -> None:
    """The column of report hashes exists and holds text; SchemaError at `release.hash_column`."""
    if column not in schema:
        raise SchemaError(
            column, "not found in the input (each report's wave_hash, posted by the page)",
            HASH_PATH,
        )  # fmt: skip
    if not untyped and schema[column] not in (pl.String, pl.Null):
        raise SchemaError(column, f"has dtype {schema[column]} but holds hashes (text)", HASH_PATH)


def stale(expected: str) -> pl.Expr:
    """1 for a report whose hash is missing or not `expected`."""
    return (pl.col(_HASH).is_null() | (pl.col(_HASH) != expected)).cast(pl.Int64)


def describe_reports(randomizer: Randomizer) -> str:
    """What a report of `randomizer` looks like, in words."""
    if randomizer.mechanism == "krr":
        return f"one of its {randomizer.k} answers"
    if randomizer.mechanism == "oue":
        return f"{randomizer.k} characters 0 or 1"
    return f"'a:b:y' with 1 ≤ a < {PRIME}, 0 ≤ b < {PRIME}, 0 ≤ y < {randomizer.g}"


def domain_dtype(randomizer: Randomizer) -> pl.DataType:
    """The type of the wave's answers (text, integers or booleans)."""
    return pl.Series(list(randomizer.domain)).dtype


def check_question(schema: pl.Schema, column: str, randomizer: Randomizer, untyped: bool) -> None:
    """The column of randomized answers exists and can hold this wave's reports; SchemaError at
    `wave.question` otherwise (names the column and types, never a value)."""
    if column not in schema:
        raise SchemaError(column, "not found in the input (the wave's randomized answers)",
                          QUESTION_PATH)  # fmt: skip
    dtype = schema[column]
    if untyped or dtype == pl.Null:
        return
    if randomizer.mechanism == "krr":
        wanted = domain_dtype(randomizer)
        text = dtype in (pl.String, pl.Categorical) or isinstance(dtype, pl.Enum)
        fits = (
            text
            if wanted == pl.String
            else dtype == wanted or (wanted.is_integer() and dtype.is_integer())
        )
        what = f"answers of the domain ({wanted})"
    else:
        fits = dtype == pl.String
        what = f"text reports ({describe_reports(randomizer)})"
    if not fits:
        raise SchemaError(column, f"has dtype {dtype} but holds {what}", QUESTION_PATH)


def _support_exprs(randomizer: Randomizer) -> tuple[pl.Expr, list[pl.Expr]]:
    """Whether a report is malformed, and per answer j whether it supports j (OUE and OLH)."""
    report, k = pl.col(_REPORT), randomizer.k
    if randomizer.mechanism == "oue":
        bad = ~report.str.contains(f"^[01]{{{k}}}$")
        return bad, [report.str.slice(j, 1) == "1" for j in range(k)]
    assert randomizer.g is not None
    parts = report.str.extract_groups(r"^(\d{1,10}):(\d{1,10}):(\d{1,10})$")
    a, b, y = (parts.struct.field(str(i)).cast(pl.Int64) for i in (1, 2, 3))
    bad = ~(
        report.str.contains(r"^\d{1,10}:\d{1,10}:\d{1,10}$")
        & a.is_between(1, PRIME - 1)
        & b.is_between(0, PRIME - 1)
        & y.is_between(0, randomizer.g - 1)
    )
    return bad, [((a * j + b) % PRIME) % randomizer.g == y for j in range(k)]


def polars_counts(
    data: DataSource, structure: ResolvedSpec, columns: ReportColumns, randomizer: Randomizer
) -> CellCounts:
    """Respondents and support counts per cell, with polars (see the module docstring)."""
    column = columns.question
    lf = scan(data)
    declaration: Declared = declared(data)
    with withholding_engine_errors("reading the input's schema"):
        schema = lf.collect_schema()
    validate_schema(schema, key_plan(structure), declaration)
    untyped = declaration.untyped is None or column in declaration.untyped
    check_question(schema, column, randomizer, untyped)
    hashes_untyped = declaration.untyped is None or columns.hash_column in declaration.untyped
    check_hash_column(schema, columns.hash_column, hashes_untyped)
    keys = structure.spec.key_columns
    grid = structure.key_grid.rename({c: f":key{i}" for i, c in enumerate(keys)})
    grid = grid.with_row_index(_CELL)
    selected = lf.select(
        *(
            polars_key(c, schema[c], structure.key_dtype(c)).alias(f":key{i}")
            for i, c in enumerate(keys)
        ),  # fmt: skip
        pl.col(column).alias(_REPORT),
        pl.col(columns.hash_column).cast(pl.String).alias(_HASH),
    ).filter(pl.col(_REPORT).is_not_null())
    if keys:
        selected = selected.join(grid.lazy(), on=[f":key{i}" for i in range(len(keys))])
    else:
        selected = selected.with_columns(pl.lit(0, dtype=pl.UInt32).alias(_CELL))
    cells, k = max(structure.key_grid.height, 1), randomizer.k
    with withholding_engine_errors("counting the randomized reports"):
        if randomizer.mechanism == "krr":
            answers = pl.DataFrame(
                {_REPORT: list(randomizer.domain), _INDEX: range(k)},
                schema={_REPORT: domain_dtype(randomizer), _INDEX: pl.Int64},
            )
            typed = polars_key(_REPORT, schema[column], domain_dtype(randomizer))
            joined = selected.with_columns(typed).join(answers.lazy(), on=_REPORT, how="left")
            pairs = joined.group_by(_CELL, _INDEX).agg(
                pl.len().alias(":reports"), stale(columns.expected).sum().alias(_STALE)
            )
            observed = pairs.collect()
            if observed[_STALE].sum():
                raise another_configuration(columns, int(observed[_STALE].sum()))
            bad = observed.filter(pl.col(_INDEX).is_null())
            if bad.height:
                raise malformed(column, randomizer, int(bad[":reports"].sum()))
            support = np.zeros((cells, k), dtype=np.int64)
            np.add.at(
                support,
                (observed[_CELL].to_numpy().astype(np.int64), observed[_INDEX].to_numpy()),
                observed[":reports"].to_numpy(),
            )
            return CellCounts(support.sum(axis=1), support)
        malformed_row, supports = _support_exprs(randomizer)
        per_cell = (
            selected.group_by(_CELL)
            .agg(
                pl.len().alias(":n"),
                stale(columns.expected).sum().alias(_STALE),
                malformed_row.sum().alias(_BAD),
                *(s.sum().alias(f":s{j}") for j, s in enumerate(supports)),
            )
            .collect()
        )
    if per_cell[_STALE].sum():
        raise another_configuration(columns, int(per_cell[_STALE].sum()))
    if per_cell[_BAD].sum():
        raise malformed(column, randomizer, int(per_cell[_BAD].sum()))
    respondents = np.zeros(cells, dtype=np.int64)
    support = np.zeros((cells, k), dtype=np.int64)
    rows = per_cell[_CELL].to_numpy().astype(np.int64)
    respondents[rows] = per_cell[":n"].to_numpy()
    support[rows] = per_cell.select(f":s{j}" for j in range(k)).to_numpy()
    return CellCounts(respondents, support)
