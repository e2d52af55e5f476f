"""What outsiders broke, library side: pandas dtypes are a declared schema, public keys files
are read like confidential input, and a mean never states more than its bounds allow.

Each test failed before its fix (issue 18); the faces (CLI, API) are tested in
tests/system/test_outsider_inputs.py.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import pandas as pd
import polars as pl
import pytest
import yaml
from conftest import ROOT, exact_table, make_spec, prepare_release

from dprelease.errors import SchemaError, SpecError
from dprelease.spec import ResolvedSpec, load_spec

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


# --- public keys files are read like confidential input ---------------------------------------

SECRET = "confidential-value-42"


def keyed(folder: Path, domain: dict[str, Any]) -> ResolvedSpec:
    """A spec whose one group-by column takes `domain`, read from `folder/spec.yaml`."""
    spec = {**PARTY_SPEC, "group_by": [{"column": "clinic", "domain": domain}]}
    (folder / "spec.yaml").write_text(yaml.safe_dump({"release": spec}))
    return load_spec(folder / "spec.yaml")


def refused_keys_file(folder: Path, file: str, *words: str) -> str:
    with pytest.raises(SpecError) as refused:
        keyed(folder, {"file": file})
    message = str(refused.value)
    assert message.startswith("release.group_by[0].domain.file: ")
    assert "\n" not in message and len(message) < 400, message
    assert SECRET not in message and "clinic-" not in message
    for word in words:
        assert word in message, message
    return message


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"", ["is empty"]),
        (b"clinic\n" + SECRET.encode("utf-16"), ["not UTF-8"]),
        (f'clinic\n"{SECRET}\nclinic-b"x,y\n"clinic-c\n'.encode(), ["not a well-formed CSV"]),
        (b"clinic\n" + "".join(f"{i}\n" for i in range(149)).encode() + SECRET.encode(), []),
    ],
    ids=["empty", "utf-16", "bad quoting", "late text"],
)
def test_a_bad_keys_file_is_one_line_naming_path_and_file_never_its_content(
    tmp_path: Path, content: bytes, words: list[str]
) -> None:
    (tmp_path / "keys.csv").write_bytes(content)
    if not words:  # a readable file: its keys are typed from all of its rows, text here
        keys = keyed(tmp_path, {"file": "keys.csv"}).domains[0].get_column("clinic")
        assert keys.dtype == pl.String and keys.len() == 150 and keys.n_unique() == 150
        return
    refused_keys_file(tmp_path, "keys.csv", str(tmp_path / "keys.csv"), *words)


def test_a_keys_file_that_is_not_parquet_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "keys.parquet").write_text(f"clinic\n{SECRET}\n")
    refused_keys_file(tmp_path, "keys.parquet", "not a readable parquet file")


def test_a_duplicate_key_is_refused_without_quoting_it(tmp_path: Path) -> None:
    (tmp_path / "keys.csv").write_text(f"clinic\n{SECRET}\nclinic-b\n{SECRET}\n")
    refused_keys_file(tmp_path, "keys.csv", "lists a key more than once")


@pytest.mark.parametrize("outside", ["../keys.csv", "../../../../etc/passwd", "ABSOLUTE"])
def test_a_keys_file_outside_the_spec_directory_is_refused(tmp_path: Path, outside: str) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    pl.DataFrame({"clinic": ["a", "b"]}).write_csv(tmp_path / "keys.csv")
    file = str(tmp_path / "keys.csv") if outside == "ABSOLUTE" else outside
    refused_keys_file(specs, file, "outside the spec's directory", "outside_spec_dir: true")


def test_a_symlink_out_of_the_spec_directory_is_outside_it(tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    pl.DataFrame({"clinic": ["a", "b"]}).write_csv(tmp_path / "keys.csv")
    (specs / "keys.csv").symlink_to(tmp_path / "keys.csv")
    refused_keys_file(specs, "keys.csv", "outside the spec's directory")


def test_a_keys_file_is_read_relative_to_the_spec_not_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "specs" / "public").mkdir(parents=True)
    pl.DataFrame({"clinic": ["a", "b"]}).write_csv(tmp_path / "specs" / "public" / "keys.csv")
    pl.DataFrame({"clinic": ["x"]}).write_csv(tmp_path / "keys.csv")  # a decoy beside the cwd
    monkeypatch.chdir(tmp_path)
    resolved = keyed(tmp_path / "specs", {"file": "public/keys.csv"})
    assert resolved.domains[0].get_column("clinic").to_list() == ["a", "b"]


def test_outside_spec_dir_allows_a_keys_file_elsewhere_and_enters_the_hash_only_when_set(
    tmp_path: Path,
) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    pl.DataFrame({"clinic": ["a", "b"]}).write_csv(tmp_path / "keys.csv")
    pl.DataFrame({"clinic": ["a", "b"]}).write_csv(specs / "keys.csv")
    inside = keyed(specs, {"file": "keys.csv"})
    allowed = keyed(specs, {"file": str(tmp_path / "keys.csv"), "outside_spec_dir": True})
    assert allowed.domains[0].equals(inside.domains[0])
    assert "outside_spec_dir" not in inside.spec.canonical_json()
    assert '"outside_spec_dir":true' in allowed.spec.canonical_json()
    unset = keyed(specs, {"file": "keys.csv", "outside_spec_dir": False})
    assert unset.hash == inside.hash  # false is the default: the same spec
    assert "outside_spec_dir" not in inside.spec.to_yaml()


def test_the_repository_specs_keep_their_hashes() -> None:
    """Specs released before the option existed are the same specs: their slots stay theirs."""
    resolved = load_spec(ROOT / "pipelines" / "specs" / "visits_monthly.yaml")
    assert '"domain":{"column":null,"file":"public/clinics.csv"}' in resolved.spec.canonical_json()


def test_a_keys_file_that_is_a_fifo_is_refused_as_such(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "keys.csv")
    refused_keys_file(tmp_path, "keys.csv", "is a FIFO (named pipe), not a regular file")
