"""What outsiders broke, library side: pandas dtypes are a declared schema, public keys files
are read like confidential input, and a mean never states more than its bounds allow.

Each test failed before its fix (issue 18); the faces (CLI, API) are tested in
tests/system/test_outsider_inputs.py.
"""

from __future__ import annotations

import datetime as dt

import pandas as pd
import polars as pl
import pytest
from conftest import exact_table, make_spec, prepare_release

from dprelease.errors import SchemaError

# --- a pandas frame's dtypes are its declared schema ------------------------------------------

PARTY_SPEC = {
    "name": "t",
    "source": "t",
    "privacy_unit": "pid",
    "max_rows_per_unit": 1,
    "group_by": [{"column": "region", "domain": {"values": ["n", "s"]}}],
    "statistics": [
        {"name": "n", "kind": "count"},
        {"name": "m", "kind": "mean", "column": "party", "lower": 0, "upper": 10},
    ],
}
TEXT_DTYPES = ["object", "string", "str"]  # object, StringDtype(NA), pandas 3's default str


def party_frame(text_dtype: str) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "pid": [1, 2, 3],
            "region": ["n", "s", "s"],
            "party": pd.Series(["3", "7", "x"], dtype=text_dtype),
        }
    )


@pytest.mark.parametrize("text_dtype", TEXT_DTYPES)
def test_a_mean_over_a_pandas_text_column_is_refused_as_parquet_and_polars_are(
    text_dtype: str,
) -> None:
    frame = party_frame(text_dtype)
    expected = "column 'party': has dtype String but statistic 'm' needs a numeric column"
    with pytest.raises(SchemaError, match=expected):
        prepare_release(pl.from_pandas(frame.astype({"party": "string"})), make_spec(PARTY_SPEC))
    with pytest.raises(SchemaError, match=expected) as refused:
        prepare_release(frame, make_spec(PARTY_SPEC))
    message = str(refused.value)
    assert "pandas" in message and "text" in message and "pd.to_numeric" in message
    assert "\n" not in message and "'x'" not in message  # one line, no value


@pytest.mark.parametrize("text_dtype", TEXT_DTYPES)
def test_a_sum_over_a_pandas_text_column_is_refused(text_dtype: str) -> None:
    spec = make_spec(
        PARTY_SPEC,
        statistics=[{"name": "s", "kind": "sum", "column": "party", "lower": 0, "upper": 10}],
    )
    with pytest.raises(SchemaError, match="statistic 's' needs a numeric column"):
        prepare_release(party_frame(text_dtype), spec)


def test_an_object_column_of_numbers_is_text_too() -> None:
    """The dtype declares the type, never the values: an object column holding Python ints is
    refused as a text column would be (a schema chosen from the data would be data-dependent)."""
    frame = party_frame("object")
    frame["party"] = pd.Series([3, 7, 1], dtype=object)
    with pytest.raises(SchemaError, match="needs a numeric column.*pd.to_numeric"):
        prepare_release(frame, make_spec(PARTY_SPEC))
    frame["party"] = pd.to_numeric(frame["party"])  # what the message says to do
    assert exact_table(frame, make_spec(PARTY_SPEC)).get_column("m").to_list() == [3.0, 4.0]


@pytest.mark.parametrize("text_dtype", TEXT_DTYPES)
def test_an_integer_domain_on_a_pandas_text_column_is_refused_as_the_reverse_case_is(
    text_dtype: str,
) -> None:
    coded = make_spec(PARTY_SPEC, group_by=[{"column": "code", "domain": {"values": [1, 2]}}])
    named = make_spec(PARTY_SPEC, group_by=[{"column": "code", "domain": {"values": ["a"]}}])
    ints = pd.DataFrame({"pid": [1, 2], "code": [1, 2], "party": [1.0, 2.0]})
    with pytest.raises(SchemaError, match="column 'code': has dtype Int64 but its public key"):
        prepare_release(ints, named)  # the reverse case, refused before too
    texts = ints.astype({"code": text_dtype})
    with pytest.raises(SchemaError, match="column 'code': has dtype String but its public key"):
        prepare_release(texts, coded)


def test_a_pandas_period_column_of_date_objects_is_text() -> None:
    """pandas has no date dtype: `datetime.date` values sit in an object column, which is text;
    the message says how to declare dates."""
    spec = make_spec(PARTY_SPEC, period={"column": "day"})
    frame = party_frame("object").assign(
        party=[1.0, 2.0, 3.0], day=[dt.date(2024, 1, 2), dt.date(2024, 1, 3), None]
    )
    with pytest.raises(SchemaError, match="needs Date or Datetime.*pd.to_datetime"):
        prepare_release(frame, spec, period="2024-01")
    frame["day"] = pd.to_datetime(frame["day"])
    table = exact_table(frame, spec, period="2024-01")
    assert table.get_column("n").to_list() == [1, 1]


def test_pandas_columns_typed_as_declared_release_what_polars_releases() -> None:
    """Numbers, nullable integers, booleans, datetimes and categoricals (text or integer
    categories) keep their declared types: the same release as the polars frame."""
    frame = pd.DataFrame(
        {
            "pid": pd.array([1, 2, 3, None], dtype="Int64"),
            "region": pd.Categorical(["n", "s", "s", "n"]),
            "code": pd.Categorical([1, 2, None, 1]),
            "flag": pd.array([True, False, None, True], dtype="boolean"),
            "party": [1.5, 2.5, None, 9.0],
            "day": pd.to_datetime(["2024-01-02", "2024-01-05", "2024-01-09", "2024-02-01"]),
        }
    )
    spec = make_spec(
        PARTY_SPEC,
        period={"column": "day"},
        group_by=[
            {"column": "region", "domain": {"values": ["n", "s"]}},
            {"column": "code", "domain": {"min": 1, "max": 2}},
            {"column": "flag", "domain": {"values": [True, False]}},
        ],
    )
    from_pandas = exact_table(frame, spec, period="2024-01")
    assert from_pandas.equals(exact_table(pl.from_pandas(frame), spec, period="2024-01"))
    assert from_pandas.get_column("n").sum() == 2
