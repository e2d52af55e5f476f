"""The release's files in readers' formats: CSV with integers as integers."""

from __future__ import annotations

import csv
import io
from types import SimpleNamespace

import pandas as pd
import polars as pl

import dprelease as dp
from dprelease.mechanism.noise import NoiseSource
from dprelease.publication import csv_bytes
from dprelease.publish import RELEASE_FILES, decide_budget, prepare
from dprelease.spec import resolve

NHANES = pd.read_csv("docs/data/nhanes2.csv")
WEIGHT = {"column": "finalwgt", "upper": 80_000}


def drawn(**extra: object) -> tuple[pl.DataFrame, dict]:
    """A seeded release of NHANES II by region and race, with margins, and its manifest JSON."""
    spec = dp.ReleaseSpec.model_validate(
        {
            "name": "bp",
            "source": "nhanes",
            "group_by": [
                {"column": "region", "domain": {"min": 1, "max": 4}},
                {"column": "race", "domain": {"values": [1, 2, 3]}},
            ],
            "margins": [["region"], []],
            "statistics": [
                {"name": "respondents", "kind": "count"},
                {"name": "population", "kind": "count", "survey_weight": WEIGHT},
                {"name": "high_bp", "kind": "mean", "column": "highbp", "lower": 0, "upper": 1,
                 "survey_weight": WEIGHT},
            ],
            **extra,
        }
    )  # fmt: skip
    resolved = resolve(spec)
    prepared = prepare(NHANES, resolved, decide_budget(resolved, epsilon=1))
    release = prepared.draw(NoiseSource.seeded_for_tests(11), allow_unsafe_noise=True)
    return release.table, release.manifest.to_json_dict()


def test_csv_writes_integral_values_as_integers() -> None:
    """A count's margin (Float64 in the table) and a weighted count rounded to its place are
    integers in the CSV: `16`, never `16.0` (the issue's `52.0`); other values keep their
    decimals."""
    table, _ = drawn()
    assert table.schema["respondents_moe95"] == pl.Float64  # the mechanism's dtype
    text = csv_bytes(table).decode()
    columns = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    for name in ("respondents", "respondents_moe95", "population", "population_moe95"):
        assert not columns[name].str.contains(".", regex=False).any(), name
    assert "16.0" in table.write_csv() or ".0," in table.write_csv()  # what polars alone writes
    read = pd.read_csv(io.StringIO(text))
    assert read.respondents_moe95.dtype.kind == "i" and read.population.dtype.kind == "i"
    assert read.high_bp.dtype.kind == "f"
    assert (read.population.to_numpy() == table.get_column("population").to_numpy()).all()


def test_a_float_column_with_a_fraction_keeps_its_decimals() -> None:
    table = pl.DataFrame({"a": [1.0, 2.5], "b": [3.0, None], "c": [float("nan"), 1.0]})
    assert csv_bytes(table).decode().splitlines() == ["a,b,c", "1.0,3,NaN", "2.5,,1.0"]


def test_release_csv_from_the_ledgers_copy_has_integers_as_integers() -> None:
    """The file `write_release_files` writes (before: `16.0` for a count's margin)."""
    table, _ = drawn()
    parquet = io.BytesIO()
    table.write_parquet(parquet)
    stored = SimpleNamespace(table_parquet=parquet.getvalue())
    text = RELEASE_FILES["release.csv"](stored).decode()  # type: ignore[arg-type]
    assert text == csv_bytes(table).decode()
    first = next(iter(csv.DictReader(io.StringIO(text))))
    assert first["respondents_moe95"] == str(int(table.get_column("respondents_moe95")[0]))
