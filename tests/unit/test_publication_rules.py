"""Reliability rules: flags (u) and suppression are decided from the released values alone, row
by row, whatever else the table holds; every rule reads the table as released."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

import dprelease as dp
from dprelease.publication import JudgedRule, evaluate, value_columns
from dprelease.spec import Rule

SPEC = dp.ReleaseSpec.model_validate(
    {
        "name": "r",
        "source": "r",
        "group_by": [{"column": "k", "domain": {"min": 0, "max": 9}}],
        "statistics": [
            {"name": "people", "kind": "count"},
            {"name": "income", "kind": "mean", "column": "x", "lower": 0, "upper": 100},
            {
                "name": "age",
                "kind": "median",
                "column": "a",
                "lower": 0,
                "upper": 100,
                "resolution": 1,
            },
        ],
    }
)
COLUMNS = value_columns(SPEC)
RULES = [
    JudgedRule("small", Rule(value_below=10, action="suppress", apply_to="row"), ("people",)),
    JudgedRule("wide", Rule(relative_margin_above=0.3, action="flag"), ("people", "income", "age")),
]

finite = st.floats(-1e6, 1e6, allow_nan=False)
margin = st.floats(0, 1e6, allow_nan=False)


@st.composite
def released(draw: st.DrawFn, rows: int = 6) -> pl.DataFrame:
    """A released table of SPEC's shape: any values, margins and intervals (nulls where a
    mean is undefined)."""

    def column(values: st.SearchStrategy[float], nulls: bool = False) -> list[float | None]:
        item = st.one_of(st.none(), values) if nulls else values
        return draw(st.lists(item, min_size=rows, max_size=rows))

    age = column(st.floats(0, 100))
    return pl.DataFrame(
        {
            "k": list(range(rows)),
            "people": [int(v) for v in column(st.floats(-50, 500))],
            "people_moe95": column(margin),
            "income": column(finite, nulls=True),
            "income_moe95": column(margin, nulls=True),
            "income_undefined": [False] * rows,
            "income_uninformative": [False] * rows,
            "age": age,
            "age_low": [a - d for a, d in zip(age, column(st.floats(0, 50)), strict=True)],
            "age_high": [a + d for a, d in zip(age, column(st.floats(0, 50)), strict=True)],
        },
        schema_overrides={"income": pl.Float64, "income_moe95": pl.Float64},
    )


def flags(table: pl.DataFrame) -> pl.DataFrame:
    out = evaluate(table, COLUMNS, RULES).table
    return out.select(
        c for c in out.columns if c.endswith("_flag") or c in ("people", "income", "age")
    )


@settings(max_examples=150, deadline=None)
@given(table=released(), secret=st.lists(finite, min_size=6, max_size=6))
def test_what_is_not_released_cannot_change_a_flag(
    table: pl.DataFrame, secret: list[float]
) -> None:
    """A column the rules do not read (here a stand-in for anything confidential) changes no
    flag and no suppression."""
    with_secret = table.with_columns(pl.Series("secret", secret))
    assert flags(with_secret).equals(flags(table))


@settings(max_examples=150, deadline=None)
@given(table=released(), other=released())
def test_a_rows_flags_depend_on_that_rows_released_values_only(
    table: pl.DataFrame, other: pl.DataFrame
) -> None:
    """Swap every row but the first for another table's: the first row's flags stay."""
    mixed = pl.concat([table.head(1), other.tail(other.height - 1)])
    assert flags(mixed).head(1).equals(flags(table).head(1))


@settings(max_examples=150, deadline=None)
@given(table=released())
def test_flags_are_exactly_the_rules_tests(table: pl.DataFrame) -> None:
    """An oracle written row by row: a row whose count is below 10 loses every value (flag u);
    elsewhere a value whose margin exceeds 30% of it is flagged u, the rest unflagged."""
    out = evaluate(table, COLUMNS, RULES).table
    for row, got in zip(table.iter_rows(named=True), out.iter_rows(named=True), strict=True):
        small = row["people"] < 10
        for name, margin_of in (
            ("people", lambda r: r["people_moe95"]),
            ("income", lambda r: r["income_moe95"]),
            ("age", lambda r: max(r["age"] - r["age_low"], r["age_high"] - r["age"])),
        ):
            value, m = row[name], margin_of(row)
            wide = value is not None and m is not None and m > 0.3 * abs(value)
            if small:
                assert got[name] is None and got[f"{name}_flag"] == "u"
            else:
                assert got[name] == value
                assert got[f"{name}_flag"] == ("u" if wide else None)
        if small:  # margins and intervals go with their values
            assert got["people_moe95"] is None and got["income_moe95"] is None
            assert got["age_low"] is None and got["age_high"] is None


@settings(max_examples=80, deadline=None)
@given(table=released())
def test_the_order_of_the_rules_does_not_matter(table: pl.DataFrame) -> None:
    forward = evaluate(table, COLUMNS, RULES)
    backward = evaluate(table, COLUMNS, RULES[::-1])
    assert forward.table.equals(backward.table)
    assert forward.rows == backward.rows[::-1] and forward.values == backward.values[::-1]


def test_the_counts_are_of_rows_and_values_touched() -> None:
    table = pl.DataFrame(
        {
            "k": [0, 1, 2],
            "people": [5, 50, 500],
            "people_moe95": [3.0, 30.0, 30.0],
            "income": [10.0, None, 40.0],
            "income_moe95": [1.0, None, 20.0],
            "income_undefined": [False, True, False],
            "income_uninformative": [False, None, False],
            "age": [30.0, 40.0, 50.0],
            "age_low": [29.0, 39.0, 10.0],
            "age_high": [31.0, 41.0, 52.0],
        }
    )
    result = evaluate(table, COLUMNS, RULES)
    assert result.rows == (1, 3)  # row 0 is small; rows 0, 1, 2 each have a wide value
    assert result.values == (3, 4)  # 3 values suppressed; people 0,1, income 2, age 2 flagged
    assert result.table.get_column("income_flag").to_list() == ["u", None, "u"]
    # the flag columns follow their values' own columns
    columns = result.table.columns
    assert columns.index("people_flag") == columns.index("people_moe95") + 1
    assert columns.index("age_flag") == columns.index("age_high") + 1


def test_a_zero_with_a_margin_is_of_low_reliability_and_a_blank_never_is() -> None:
    table = pl.DataFrame(
        {
            "k": [0, 1],
            "people": [0, 20],
            "people_moe95": [4.0, 4.0],
            "income": [None, 0.0],
            "income_moe95": [None, 0.0],
            "income_undefined": [True, False],
            "income_uninformative": [None, False],
            "age": [1.0, 2.0],
            "age_low": [1.0, 2.0],
            "age_high": [1.0, 2.0],
        },
        schema_overrides={"income": pl.Float64, "income_moe95": pl.Float64},
    )
    wide = [RULES[1]]
    out = evaluate(table, COLUMNS, wide).table
    assert out.get_column("people_flag").to_list() == ["u", None]
    assert out.get_column("income_flag").to_list() == [None, None]  # blank: nothing to judge
    assert not math.isnan(out.get_column("age")[0])
    assert np.all(out.get_column("age_flag").is_null().to_numpy())
