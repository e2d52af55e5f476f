"""What `--data` may be: refusals name the input (never "column 'data.json'"), a directory is
read only as a parquet dataset and never as an earlier release's output, and a header-only
CSV is an empty input, released (with an operator warning), not a dtype mismatch."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pandas as pd
import polars as pl
import pytest
import yaml
from helpers import exact_table, prepare_release
from typer.testing import CliRunner

import dprelease as dp
from dprelease.cli import app
from dprelease.errors import InputError, SchemaError
from dprelease.spec import ResolvedSpec, parse_spec

SPEC_YAML = """\
release:
  name: t
  source: t
  privacy_unit: pid
  max_rows_per_unit: 1
  group_by: [{column: age, domain: {min: 1, max: 3}}]
  statistics: [{name: n, kind: count}, {name: s, kind: sum, column: x, lower: 0, upper: 9}]
"""
ROWS = pl.DataFrame({"pid": [1, 2], "age": [1, 2], "x": [1.0, 2.0]})


def loaded() -> ResolvedSpec:
    return parse_spec(yaml.safe_load(SPEC_YAML)["release"])


def cli(tmp_path: Path, data: Path, out: str = "out"):
    (tmp_path / "spec.yaml").write_text(SPEC_YAML)
    args = ["release", "--spec", str(tmp_path / "spec.yaml"), "--data", str(data)]
    args += ["--out", str(tmp_path / out), "--epsilon", "1", "--cap", "1"]
    return CliRunner().invoke(app, [*args, "--ledger", str(tmp_path / "ledger.sqlite")])


def refused(result, tmp_path: Path, words: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and words in result.stderr
    assert "column '" not in result.stderr
    assert not (tmp_path / "ledger.sqlite").exists() and not (tmp_path / "out").exists()


def test_an_unsupported_file_format_names_the_input(tmp_path: Path) -> None:
    (tmp_path / "data.json").write_text("{}")
    result = cli(tmp_path, tmp_path / "data.json")
    refused(result, tmp_path, f"input '{tmp_path / 'data.json'}': not a format dprelease reads")
    with pytest.raises(InputError, match="input 'dict'"):
        prepare_release({"pid": [1]}, loaded(), 1.0)


def test_a_directory_is_read_as_a_parquet_dataset(tmp_path: Path) -> None:
    flat = tmp_path / "flat"
    flat.mkdir()
    ROWS.head(1).write_parquet(flat / "part-0.parquet")
    ROWS.tail(1).write_parquet(flat / "part-1.parquet")
    (flat / "_SUCCESS").write_text("")
    hive = tmp_path / "hive"
    for age in (1, 2):
        (hive / f"age={age}").mkdir(parents=True)
        ROWS.filter(pl.col("age") == age).drop("age").write_parquet(hive / f"age={age}/0.parquet")
    for directory in (flat, hive):
        counts = prepare_release(directory, loaded(), 1.0).draw().table.get_column("n")
        assert counts.len() == 3


def test_a_release_directory_or_another_layout_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    ROWS.write_parquet(data / "rows.parquet")
    assert cli(tmp_path, data, out="data/2024").exit_code == 0  # a release inside the input
    (tmp_path / "ledger.sqlite").unlink()
    refused(cli(tmp_path, data), tmp_path, "holds published dprelease output")
    refused(cli(tmp_path, data / "2024"), tmp_path, "holds published dprelease output")
    (data / "2024" / "manifest.json").unlink()
    refused(cli(tmp_path, data), tmp_path, "not a hive partition")
    empty = tmp_path / "empty"
    empty.mkdir()
    refused(cli(tmp_path, empty), tmp_path, "holds no .parquet files")


def test_a_header_only_csv_is_an_empty_input(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "empty.csv").write_text("pid,age,x\n")
    with caplog.at_level(logging.WARNING, logger="dprelease.operator"):
        table = prepare_release(tmp_path / "empty.csv", loaded(), 1.0).draw().table
    assert table.height == 3
    assert ["the input has no rows" in r.getMessage() for r in caplog.records] == [True]
    assert cli(tmp_path, tmp_path / "empty.csv").exit_code == 0


def test_integer_codes_stored_as_floats_are_integer_keys() -> None:
    """Survey files store codes 1–5 as floats: 2.0 is the key 2; 1.5 is outside the domain."""
    codes = pd.DataFrame({"pid": [1, 2, 3, 4, 5], "age": [1.0, 2.0, 2.0, 3.0, 1.5], "x": 1.0})
    assert codes["age"].dtype == float
    assert exact_table(codes, loaded(), 1.0).get_column("n").to_list() == [1, 2, 1]


def _dataset(tmp_path: Path, second: pl.DataFrame) -> Path:
    """A dataset directory of two files: ROWS' first row, and `second`."""
    data = tmp_path / "data"
    data.mkdir()
    ROWS.head(1).write_parquet(data / "part-0.parquet")
    second.write_parquet(data / "part-1.parquet")
    return data


DISAGREEING = {  # a second file that disagrees with the first → what the refusal says
    "dtype": (
        ROWS.tail(1).with_columns(pl.col("x").cast(pl.Int64)),
        "has dtypes Float64 and Int64",
    ),
    "missing": (ROWS.tail(1).drop("x"), "is missing from some files"),
}


@pytest.mark.parametrize("case", sorted(DISAGREEING))
def test_a_dataset_whose_files_disagree_on_a_column_is_refused_before_any_charge(
    tmp_path: Path, case: str
) -> None:
    """Each file's footer is checked in prepare(): polars found the file that disagrees only
    while aggregating, after the reservation, which stayed open holding its ε."""
    second, words = DISAGREEING[case]
    data = _dataset(tmp_path, second)
    said = f"release.statistics[1].column: column 'x': {words}"
    result = cli(tmp_path, data)
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and said in result.stderr
    assert not (tmp_path / "ledger.sqlite").exists() and not (tmp_path / "out").exists()
    ledger = dp.Ledger(str(tmp_path / "api.sqlite"))
    spec = dp.ReleaseSpec.model_validate(yaml.safe_load(SPEC_YAML)["release"])
    with pytest.raises(SchemaError, match=re.escape(said)):
        dp.release(data, spec, epsilon=1, ledger=ledger, cap=1)
    assert [(s.spent, s.open_reservations) for s in ledger.status()] in ([], [(0, 0)])
    with pytest.raises(SchemaError, match=re.escape(said)):  # before a Spark session starts
        prepare_release(data, loaded(), 1.0, engine="spark")


def test_a_column_no_release_reads_may_differ_between_a_datasets_files(tmp_path: Path) -> None:
    """Only the columns a release reads must agree: a later file's extra column, or one of
    another dtype, is not read at all (polars refused the extra column while aggregating)."""
    second = ROWS.tail(1).with_columns(pl.lit("note").alias("extra"))
    assert cli(tmp_path, _dataset(tmp_path, second)).exit_code == 0
    other = tmp_path / "other"
    other.mkdir()
    ROWS.head(1).with_columns(pl.lit(1).alias("z")).write_parquet(other / "a.parquet")
    ROWS.tail(1).with_columns(pl.lit("1").alias("z")).write_parquet(other / "b.parquet")
    assert prepare_release(other, loaded(), 1.0).draw().table.get_column("n").len() == 3
