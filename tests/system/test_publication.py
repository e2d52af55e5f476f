"""A publishable table end to end: NHANES II by region and race with margins, survey-weighted,
reliability rules, counts rounded to base 5 and the sampling error beside the noise, released
through `dprelease release` (with `--format` or the spec file's `publish.formats`) and through
`dp.release` on pandas. The files open in a spreadsheet reader and parse as SDMX-CSV, a re-run
writes the same bytes, and a release without these options states nothing new."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import openpyxl
import pandas as pd
import polars as pl
import pytest
import yaml
from helpers import ROOT, invoke_cli, one_line_error

import dprelease as dp

NHANES = ROOT / "docs" / "data" / "nhanes2.csv"
WEIGHT = {"column": "finalwgt", "upper": 80_000}
RELEASE = {
    "name": "blood_pressure",
    "source": "nhanes2",
    "group_by": [
        {"column": "region", "domain": {"min": 1, "max": 4}},
        {"column": "race", "domain": {"values": [1, 2, 3]}},
    ],
    "margins": [["region"], ["race"], []],
    "statistics": [
        {"name": "respondents", "kind": "count"},
        {"name": "population", "kind": "count", "survey_weight": WEIGHT},
        {"name": "high_bp", "kind": "mean", "column": "highbp", "lower": 0, "upper": 1,
         "survey_weight": WEIGHT},
    ],
    "sampling": {"high_bp": {"design_effect": 2.0, "respondents": "respondents"}},
    "postprocess": {
        "round_to": 5,
        "rules": [
            {"name": "wide", "relative_margin_above": 0.3, "action": "flag"},
            {"name": "few", "statistics": ["respondents"], "value_below": 100,
             "action": "suppress", "apply_to": "row"},
        ],
    },
}  # fmt: skip


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    shutil.copy(NHANES, tmp_path / "nhanes2.csv")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({"release": RELEASE}, sort_keys=False))
    return tmp_path


def release(ws: Path, *args: str, spec: str = "spec.yaml", out: str = "pub") -> object:
    return invoke_cli(
        "release", "--spec", str(ws / spec), "--data", str(ws / "nhanes2.csv"),
        "--out", str(ws / out), "--ledger", str(ws / "l.sqlite"), "--epsilon", "1",
        "--cap", "2", *args,
    )  # fmt: skip


def additive(table: pl.DataFrame, column: str) -> None:
    """Every margin (region, race, the total) is the sum of its cells."""
    cells = table.filter(pl.col("level") == "region,race")
    for level, key in (("region", "region"), ("race", "race")):
        rows = table.filter(pl.col("level") == level)
        sums = cells.group_by(key).agg(pl.col(column).sum()).sort(key)
        assert rows.sort(key).get_column(column).to_list() == sums.get_column(column).to_list()
    total = table.filter(pl.col("level") == "total").get_column(column).item()
    assert total == cells.get_column(column).sum()


def test_the_command_writes_a_workbook_and_sdmx_csv_that_readers_open(ws: Path) -> None:
    result = release(ws, "--format", "csv,xlsx,sdmx")
    assert result.exit_code == 0, result.output
    out = ws / "pub"
    assert sorted(os.listdir(out)) == [
        "manifest.json", "release.csv", "release.sdmx.csv", "release.xlsx"
    ]  # fmt: skip
    manifest = json.loads((out / "manifest.json").read_text())
    publication = manifest["publication"]
    assert [rule["name"] for rule in publication["rules"]] == ["wide", "few"]
    assert publication["rounding"]["base"] == 5 and publication["rounding"]["additive"]
    assert "never privacy" in publication["note"]
    table = pl.read_csv(out / "release.csv")
    counts = table.get_column("respondents").drop_nulls()
    assert (counts % 5 == 0).all() and table.schema["respondents"] == pl.Int64
    for value, flag in zip(table["respondents"], table["respondents_flag"], strict=True):
        assert value is not None or flag == "u"  # a blank count was suppressed, and says so
    book = openpyxl.load_workbook(out / "release.xlsx")
    assert book.sheetnames == ["region,race", "region", "race", "total", "about"]
    about = {r[0]: r[1] for r in book["about"].iter_rows(min_row=2, values_only=True)}
    assert about["release id"] == "blood_pressure/-"
    sdmx = pd.read_csv(out / "release.sdmx.csv", dtype=str, keep_default_na=False)
    assert list(sdmx.columns[:7]) == [
        "STRUCTURE", "STRUCTURE_ID", "ACTION", "REGION", "RACE", "MEASURE", "OBS_VALUE"
    ]  # fmt: skip
    assert len(sdmx) == table.height * 3
    assert set(sdmx.OBS_STATUS) <= {"A", "U", "Q", "O"}
    # the stored release again: nothing charged, the same bytes in every format
    again = release(ws, "--format", "csv,xlsx,sdmx", out="again")
    assert again.exit_code == 0, again.output
    assert "already released" in again.stdout
    for name in ("release.csv", "release.xlsx", "release.sdmx.csv", "manifest.json"):
        assert (ws / "again" / name).read_bytes() == (out / name).read_bytes(), name


def test_the_spec_files_publish_section_chooses_the_formats(ws: Path) -> None:
    document = {
        "release": RELEASE,
        "publish": {"scope": "nhanes", "share": "1/2", "formats": ["parquet", "xlsx"]},
    }
    (ws / "published.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    result = release(ws, spec="published.yaml")
    assert result.exit_code == 0, result.output
    assert sorted(os.listdir(ws / "pub")) == ["manifest.json", "release.parquet", "release.xlsx"]
    table = pl.read_parquet(ws / "pub" / "release.parquet")
    assert "high_bp_moe95_combined" in table.columns and "high_bp_flag" in table.columns


def test_a_format_that_does_not_exist_is_refused_before_any_charge(ws: Path) -> None:
    result = release(ws, "--format", "csv,pdf")
    one_line_error(result, "--format", "'pdf'")
    assert not (ws / "l.sqlite").exists() and not (ws / "pub").exists()


def test_dp_release_on_pandas_returns_the_finished_table() -> None:
    data = pd.read_csv(NHANES)
    plain = {key: value for key, value in RELEASE.items() if key not in ("postprocess", "sampling")}
    result = dp.release(data, {**plain, "postprocess": {"round_to": 5}}, epsilon=1)
    table = result.table
    for column in ("respondents", "population"):
        values = table.get_column(column).to_numpy()
        assert np.all(values % 5 == 0), column
        additive(table, column)  # margins still the sums of their rounded cells
    assert result.manifest.publication is not None
    assert result.manifest.publication.rounding is not None
    flagged = dp.release(data, RELEASE, epsilon=1).table
    assert {"respondents_flag", "population_flag", "high_bp_flag"} <= set(flagged.columns)
    suppressed = flagged.filter(pl.col("respondents_flag") == "u", pl.col("respondents").is_null())
    assert suppressed.select(pl.col("high_bp").is_null().all()).item()  # the whole row goes


def test_a_release_without_publication_options_states_nothing_new() -> None:
    data = pd.read_csv(NHANES)
    plain = {key: value for key, value in RELEASE.items() if key not in ("postprocess", "sampling")}
    result = dp.release(data, plain, epsilon=1)
    assert "publication" not in result.manifest.to_json_dict()
    assert not any(c.endswith(("_flag", "_combined")) for c in result.table.columns)
