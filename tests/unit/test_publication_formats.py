"""The release's files in readers' formats: CSV with integers as integers, SDMX-CSV 2.0 with
observation-status flags, and an .xlsx workbook that a spreadsheet reader opens; each the same
bytes for the same release."""

from __future__ import annotations

import csv
import io
import json
import zipfile
from pathlib import Path
from types import SimpleNamespace

import openpyxl
import pandas as pd
import polars as pl
import pytest
from helpers import invoke_cli, one_line_error, release_args

import dprelease as dp
from dprelease.mechanism.noise import NoiseSource
from dprelease.publication import csv_bytes, sdmx_csv_bytes, xlsx_bytes
from dprelease.publish import RELEASE_FILES, decide_budget, prepare
from dprelease.spec import FORMAT_MODULES, missing_writer, resolve

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


RULES = {
    "round_to": 5,
    "rules": [
        {"relative_margin_above": 0.1, "action": "flag"},
        {"statistics": ["respondents"], "value_below": 500, "action": "suppress",
         "apply_to": "row"},
    ],
}  # fmt: skip


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


SDMX_HEADER = [
    "STRUCTURE", "STRUCTURE_ID", "ACTION", "REGION", "RACE", "MEASURE", "OBS_VALUE",
    "OBS_STATUS", "CONF_STATUS", "MOE95",
]  # fmt: skip


def test_sdmx_csv_has_one_row_per_cell_and_measure_with_observation_status() -> None:
    """SDMX-CSV 2.0 (SDMX 3.0): STRUCTURE, STRUCTURE_ID, ACTION, the dimensions, the measure
    and its attributes; a margin's summed-over dimension is `_T`; CL_OBS_STATUS codes."""
    table, manifest = drawn(postprocess=RULES)
    frame = pd.read_csv(
        io.BytesIO(sdmx_csv_bytes(table, manifest)), dtype=str, keep_default_na=False
    )
    assert list(frame.columns) == SDMX_HEADER
    assert len(frame) == table.height * 3  # cells and margin rows × the three measures
    assert set(frame.STRUCTURE) == {"dataflow"} and set(frame.ACTION) == {"I"}
    assert set(frame.STRUCTURE_ID) == {"DPRELEASE:BP(1.0.0)"}
    assert set(frame.CONF_STATUS) == {"F"}  # nothing is confidential, suppressed or not
    assert set(frame.OBS_STATUS) <= {"A", "U", "Q", "O"}
    total = frame[(frame.REGION == "_T") & (frame.RACE == "_T")]
    assert list(total.MEASURE) == ["respondents", "population", "high_bp"]
    flags = {c: table.get_column(f"{c}_flag").to_list() for c in ("respondents", "high_bp")}
    for measure in ("respondents", "high_bp"):
        rows = frame[measure == frame.MEASURE]
        values = table.get_column(measure).to_list()
        for status, value, flag, text in zip(
            rows.OBS_STATUS, values, flags[measure], rows.OBS_VALUE, strict=True
        ):
            expected = "A" if flag is None else ("U" if value is not None else "Q")
            assert status == expected
            assert (text == "") == (value is None)
    assert "Q" in set(frame.OBS_STATUS) and "U" in set(frame.OBS_STATUS)
    counts = frame[frame.MEASURE.isin(["respondents", "population"])].OBS_VALUE
    assert not counts.str.contains(".", regex=False).any()  # integers, as in release.csv


def test_sdmx_csv_parses_with_a_maintained_sdmx_reader() -> None:
    """sdmx1's SDMX-CSV 2.0 reader, given the structure the file names, reads every row."""
    sdmx = pytest.importorskip("sdmx")
    from sdmx.model import common, v30

    table, manifest = drawn(postprocess=RULES, period=None)
    content = sdmx_csv_bytes(table, manifest)
    dsd = v30.DataStructureDefinition(
        id="BP", maintainer=common.Agency(id="DPRELEASE"), version="1.0.0"
    )
    for order, name in enumerate(("REGION", "RACE", "MEASURE")):
        dsd.dimensions.append(v30.Dimension(id=name, order=order))
    dsd.measures.append(v30.Measure(id="OBS_VALUE"))
    for name in ("OBS_STATUS", "CONF_STATUS", "MOE95"):
        dsd.attributes.append(v30.DataAttribute(id=name))
    flow = v30.Dataflow(
        id="BP", maintainer=common.Agency(id="DPRELEASE"), version="1.0.0", structure=dsd
    )
    message = sdmx.read_sdmx(io.BytesIO(content), format="csv", structure=flow)
    observations = [obs for data_set in message.data for obs in data_set.obs]
    assert len(observations) == table.height * 3
    statuses = {obs.attached_attribute["OBS_STATUS"].value for obs in observations}
    assert statuses <= {"A", "U", "Q", "O"}


def test_the_workbook_opens_in_a_spreadsheet_reader_with_a_sheet_per_level() -> None:
    table, manifest = drawn(postprocess=RULES)
    book = openpyxl.load_workbook(io.BytesIO(xlsx_bytes(table, manifest)))
    assert book.sheetnames == ["region,race", "region", "total", "about"]
    cells = book["region,race"]
    header = [c.value for c in cells[3]]
    assert header[:3] == ["region", "race", "respondents"]
    assert not any(h.endswith("_flag") for h in header)  # flags are footnotes, not columns
    rows = list(cells.iter_rows(min_row=4, max_row=3 + 12, values_only=True))
    released = table.filter(pl.col("level") == "region,race")
    for row, got in zip(released.iter_rows(named=True), rows, strict=True):
        shown = dict(zip(header, got, strict=True))
        if row["respondents"] is None:  # suppressed: Eurostat's ':' for a value not shown
            assert shown["respondents"] == ":" and row["respondents_flag"] == "u"
        else:
            assert shown["respondents"] == row["respondents"]
            assert isinstance(shown["respondents"], int)
        assert shown["population"] in (":", row["population"])
    formats = {c.number_format for c in cells[4]}
    assert any(f.endswith('" u"') for f in formats) or any(
        c.number_format.endswith('" u"') for r in cells.iter_rows(min_row=4) for c in r
    )
    footnotes = [r[0] for r in cells.iter_rows(min_row=17, values_only=True) if r[0]]
    assert any(str(f).startswith("u: low reliability") for f in footnotes)
    about = {r[0]: r[1] for r in book["about"].iter_rows(min_row=2, values_only=True)}
    assert about["release"] == "bp" and about["ε"] == "1"
    assert "never privacy" in about["publication"]
    assert "rounded to base 5" in about


def test_the_same_release_gives_the_same_workbook_bytes() -> None:
    """Its dates are the release's (never the time of writing) and its zip entries' fixed."""
    table, manifest = drawn(postprocess=RULES)
    first = xlsx_bytes(table, manifest)
    again = xlsx_bytes(pl.DataFrame(table), json.loads(json.dumps(manifest)))
    assert first == again
    properties = openpyxl.load_workbook(io.BytesIO(first)).properties
    created = manifest["created_at"].replace("Z", "")
    assert properties.created.isoformat() == properties.modified.isoformat() == created
    with zipfile.ZipFile(io.BytesIO(first)) as archive:
        assert {info.date_time for info in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}


def test_a_workbook_without_its_writer_is_refused_before_anything_is_spent(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """openpyxl comes with the `publication` extra: where it is missing, xlsx is refused at
    `--format` and at `publish.formats` with one line saying what to install, and no ledger is
    opened, no budget charged, no file written."""
    monkeypatch.setitem(FORMAT_MODULES, "xlsx", ("no_such_writer_module", "publication"))
    args = [*release_args(workspace, "2024-01"), "--epsilon", "1/10", "--cap", "1"]
    result = invoke_cli("release", *args, "--format", "csv,xlsx")
    one_line_error(result, "--format", "pip install 'dprelease[publication]'")
    assert not (workspace / "ledger.sqlite").exists() and not (workspace / "pub").exists()
    spec = workspace / "spec.yaml"
    spec.write_text(spec.read_text() + "publish: {scope: s, share: 1/12, formats: [xlsx]}\n")
    result = invoke_cli("release", *args)
    one_line_error(result, "publish.formats", "no_such_writer_module")
    assert not (workspace / "ledger.sqlite").exists() and not (workspace / "pub").exists()
    monkeypatch.undo()
    assert missing_writer(["xlsx", "sdmx", "csv"]) is None  # here the extra is installed
