"""The release's table in the formats readers use: CSV, SDMX-CSV and an .xlsx workbook.

Each writer is a pure function of the released table and the manifest (as the ledger stores
them) to bytes, so every run of a slot writes the same bytes, and `publish.write_release_files`
writes each file whole. Numbers are written as they were released: an integral value as an
integer (a count is `52`, never `52.0`), every other one in the shortest form that reads back as
the same float.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import polars as pl

from dprelease.spec import COMBINED_SUFFIX as COMBINED
from dprelease.spec import (
    DEFAULT_FORMATS,
    FLAG_SUFFIX,
    HIGH_SUFFIX,
    LEVEL_COLUMN,
    LOW_RELIABILITY,
    LOW_SUFFIX,
    MOE95_SUFFIX,
    UNDEFINED_SUFFIX,
    UNINFORMATIVE_SUFFIX,
)
from dprelease.statement import FLAG_CODES


class Publishable(Protocol):
    """What a release's files are made from: its table's parquet bytes and its manifest (the
    ledger's `StoredRelease`, or a local release's, which is charged nothing and not stored)."""

    @property
    def table_parquet(self) -> bytes: ...

    @property
    def manifest(self) -> dict[str, Any]: ...


#: The file each table format is written to.
FORMAT_FILES = {
    "parquet": "release.parquet",
    "csv": "release.csv",
    "xlsx": "release.xlsx",
    "sdmx": "release.sdmx.csv",
}
#: Floats up to this size hold every integer exactly, so an integral one is written as one.
_EXACT = 2.0**53
#: SDMX: the code of a dimension a margin sums over (the cross-domain "Total"), the agency and
#: version of the structure a release's rows are stated in (not registered with any registry).
SDMX_TOTAL = "_T"
SDMX_AGENCY = "DPRELEASE"
SDMX_VERSION = "1.0.0"
#: SDMX CL_OBS_STATUS: normal, low reliability, missing value (suppressed), missing value.
OBS_STATUS = {"normal": "A", "flagged": "U", "suppressed": "Q", "missing": "O"}
#: SDMX CL_CONF_STATUS F (free): nothing in a DP release is confidential, suppressed or not.
CONF_FREE = "F"


# --------------------------------------------------------------------------- CSV


def integral_as_integers(table: pl.DataFrame) -> pl.DataFrame:
    """`table` with every float column whose values are all integers (within ±2^53) as Int64,
    so a text format writes them as integers. A function of the released values only."""
    casts = []
    for name, dtype in table.schema.items():
        if dtype != pl.Float64:
            continue
        values = table.get_column(name).drop_nulls()
        if values.is_empty() or not values.is_finite().all():
            continue
        if ((values == values.round(0)) & (values.abs() <= _EXACT)).all():
            casts.append(pl.col(name).cast(pl.Int64))
    return table.with_columns(casts) if casts else table


def csv_bytes(table: pl.DataFrame) -> bytes:
    """The table as CSV (RFC 4180, a header row), integral values as integers."""
    buffer = io.BytesIO()
    integral_as_integers(table).write_csv(buffer)
    return buffer.getvalue()


def number_text(value: object) -> str:
    """A released value as the CSV writes it (after `integral_as_integers`): its shortest repr,
    '' for none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# --------------------------------------------------------------------------- the table's parts


def _value_columns(table: pl.DataFrame, manifest: Mapping[str, Any]) -> list[str]:
    """The released value columns (counts, sums, means, each quantile's p), in table order."""
    names: list[str] = []
    for entry in manifest.get("statistics", []):
        if entry.get("kind") in ("quantile", "median"):
            names.extend(q["column"] for q in entry.get("quantiles", []))
        else:
            names.append(entry["name"])
    return [n for n in names if n in table.columns]


def _key_columns(table: pl.DataFrame, manifest: Mapping[str, Any]) -> list[str]:
    return [c for g in manifest.get("group_by", []) for c in g["columns"] if c in table.columns]


def _status(row: Mapping[str, Any], value: str) -> str:
    """A value's SDMX observation status: flagged, suppressed (blank and flagged), missing."""
    flagged = row.get(f"{value}{FLAG_SUFFIX}") == LOW_RELIABILITY
    if row.get(value) is None:
        return OBS_STATUS["suppressed" if flagged else "missing"]
    return OBS_STATUS["flagged" if flagged else "normal"]


# --------------------------------------------------------------------------- SDMX-CSV


def sdmx_id(name: str) -> str:
    """A column name as an SDMX component ID: upper case, [A-Z0-9_] only, a letter first."""
    text = re.sub(r"[^A-Za-z0-9_]", "_", name).upper()
    return text if text[:1].isalpha() else f"C_{text}"


def sdmx_csv_bytes(table: pl.DataFrame, manifest: Mapping[str, Any]) -> bytes:
    """SDMX-CSV 2.0 (SDMX 3.0): one row per cell (or margin row) and released value.

    Columns: STRUCTURE (`dataflow`), STRUCTURE_ID (`DPRELEASE:<release>(1.0.0)`), ACTION (`I`,
    information), a dimension per key column (`_T` where a margin sums over it), TIME_PERIOD for
    a release per period, MEASURE (the value's column), OBS_VALUE, and the attributes OBS_STATUS
    (CL_OBS_STATUS: A normal, U low reliability, Q suppressed, O missing), CONF_STATUS (F, free:
    nothing here is confidential), MOE95 (its 95% margin of error), MOE95_COMBINED (with the
    sampling error) and CI95_LOW, CI95_HIGH (a quantile's interval) where the release has them."""
    keys = _key_columns(table, manifest)
    values = _value_columns(table, manifest)
    period = manifest.get("period")
    attributes = [("MOE95", MOE95_SUFFIX)]
    if any(f"{v}{COMBINED}" in table.columns for v in values):
        attributes.append(("MOE95_COMBINED", COMBINED))
    if any(f"{v}{LOW_SUFFIX}" in table.columns for v in values):
        attributes += [("CI95_LOW", LOW_SUFFIX), ("CI95_HIGH", HIGH_SUFFIX)]
    header = ["STRUCTURE", "STRUCTURE_ID", "ACTION", *(sdmx_id(k) for k in keys)]
    header += ["TIME_PERIOD"] if period else []
    header += ["MEASURE", "OBS_VALUE", "OBS_STATUS", "CONF_STATUS", *(a for a, _ in attributes)]
    structure = f"{SDMX_AGENCY}:{sdmx_id(str(manifest.get('release', 'RELEASE')))}({SDMX_VERSION})"
    table = integral_as_integers(table)  # numbers as in release.csv
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for row in table.iter_rows(named=True):
        dims = [SDMX_TOTAL if row[k] is None else number_text(row[k]) for k in keys]
        for value in values:
            writer.writerow(
                [
                    "dataflow",
                    structure,
                    "I",
                    *dims,
                    *([period] if period else []),
                    value,
                    number_text(row[value]),
                    _status(row, value),
                    CONF_FREE,
                    *(number_text(row.get(f"{value}{suffix}")) for _, suffix in attributes),
                ]
            )
    return buffer.getvalue().encode()


# --------------------------------------------------------------------------- xlsx

_LEGEND = (
    (MOE95_SUFFIX, "the 95% margin of error of the noise: the truth is within value ± margin"),
    (COMBINED, "the 95% margin of error of the noise and the survey's sampling error together"),
    (LOW_SUFFIX, "the low end of a quantile's 95% interval"),
    (HIGH_SUFFIX, "its high end"),
    (UNDEFINED_SUFFIX, "a mean over a noisy count ≤ 0: no mean is defined"),
    (UNINFORMATIVE_SUFFIX, "a mean whose margin covers its whole range"),
)
_DONE = {"flag": "flagged", "suppress": "suppressed"}
_INVALID_SHEET = re.compile(r"[\\/?*\[\]:]")
_NOT_AVAILABLE = ":"  # Eurostat's sign for a value not shown


def _decimals(value: float) -> int:
    """The decimal places a released float was published with (its shortest repr's)."""
    text = repr(value)
    if "e" in text or "E" in text:
        mantissa, _, exponent = text.lower().partition("e")
        places = len(mantissa.partition(".")[2]) - int(exponent)
        return max(places, 0)
    return len(text.partition(".")[2]) if not value.is_integer() else 0


def _sheet_name(name: str, taken: set[str]) -> str:
    base = _INVALID_SHEET.sub("_", name)[:31] or "release"
    candidate, n = base, 2
    while candidate.lower() in taken:
        candidate = f"{base[:28]}_{n}"
        n += 1
    taken.add(candidate.lower())
    return candidate


def _statement(manifest: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The manifest's statement, line by line, for the workbook's `about` sheet."""
    lines = [
        ("release", str(manifest.get("release", ""))),
        ("release id", str(manifest.get("release_id") or "not recorded")),
        ("period", str(manifest.get("period") or "")),
        ("guarantee", str(manifest.get("guarantee", ""))),
        ("mechanism", str(manifest.get("mechanism", ""))),
    ]
    if manifest.get("rho_total_exact"):
        lines.append(("ρ (zCDP)", str(manifest["rho_total_exact"])))
    elif manifest.get("epsilon_total_exact"):
        lines.append(("ε", str(manifest["epsilon_total_exact"])))
    lines += [
        ("neighbours", str(manifest.get("neighbours", ""))),
        ("privacy unit", str(manifest.get("privacy_unit", ""))),
        ("created", str(manifest.get("created_at", ""))),
        ("margins of error", "each _moe95 is the half-width of a 95% interval for the noise"),
    ]
    publication = manifest.get("publication")
    if publication:
        lines.append(("publication", publication["note"]))
        for code, meaning in publication.get("flags", {}).items():
            lines.append((f"flag {code}", meaning))
        for rule in publication.get("rules", []):
            lines.append(
                (
                    f"rule {rule['name']}",
                    f"{rule['action']} ({rule['apply_to']}) where {rule['test']} for "
                    f"{', '.join(rule['statistics'])}: test held in {rule['rows']} row(s), "
                    f"{rule['values']} value(s) {_DONE[rule['action']]}",
                )
            )
        if publication.get("rounding"):
            rounding = publication["rounding"]
            lines.append((f"rounded to base {rounding['base']}", rounding["margin_of_error"]))
        for entry in publication.get("sampling", []):
            lines.append(
                (f"sampling {entry['statistic']}", f"{entry['inputs']}; {entry['recipe']}")
            )
    lines.append(("details", "manifest.json states every parameter of this release"))
    return lines


def xlsx_bytes(table: pl.DataFrame, manifest: Mapping[str, Any]) -> bytes:
    """The table as an .xlsx workbook: one sheet per level (the cells, then each margin), numbers
    formatted with the places they were released with, flags as footnotes under each sheet
    (a suppressed value shows ':'), and the manifest's statement on the sheet `about`."""
    from openpyxl import Workbook
    from openpyxl.styles import Alignment, Font

    book = Workbook()
    for sheet in list(book.worksheets):  # the empty default sheet
        book.remove(sheet)
    taken: set[str] = set()
    keys = _key_columns(table, manifest)
    values = set(_value_columns(table, manifest))
    levels = (
        table.partition_by(LEVEL_COLUMN, maintain_order=True, as_dict=False)
        if LEVEL_COLUMN in table.columns
        else [table]
    )
    title = f"{manifest.get('release', '')}" + (
        f", {manifest['period']}" if manifest.get("period") else ""
    )
    bold = Font(bold=True)
    for block in levels:
        level = str(block.get_column(LEVEL_COLUMN)[0]) if LEVEL_COLUMN in block.columns else ""
        shown = [k for k in keys if block.get_column(k).null_count() < block.height]
        flags = [c for c in block.columns if c.endswith(FLAG_SUFFIX)]
        data = [c for c in block.columns if c != LEVEL_COLUMN and c not in keys and c not in flags]
        sheet = book.create_sheet(_sheet_name(level or "release", taken))
        sheet.append([f"{title}" + (f" — {level}" if level else "")])
        sheet["A1"].font = bold
        sheet.append([])
        sheet.append([*shown, *data])
        for cell in sheet[3]:
            cell.font = bold
        marks: set[str] = set()
        for row in block.iter_rows(named=True):
            line: list[Any] = [row[k] for k in shown]
            formats: list[str | None] = [None] * len(shown)
            for name in data:
                value = row[name]
                flag = row.get(f"{name}{FLAG_SUFFIX}") if name in values else None
                if value is None and flag == LOW_RELIABILITY:
                    line.append(_NOT_AVAILABLE)
                    formats.append(None)
                elif isinstance(value, float) and not math.isnan(value):
                    line.append(value)
                    places = _decimals(value)
                    formats.append("#,##0" + ("." + "0" * places if places else ""))
                elif isinstance(value, int) and not isinstance(value, bool):
                    line.append(value)
                    formats.append("#,##0")
                else:
                    line.append(value)
                    formats.append(None)
                if flag:
                    marks.add(flag)
            sheet.append(line)
            excel_row = sheet.max_row
            for column, (fmt, name) in enumerate(
                zip(formats, [*shown, *data], strict=True), start=1
            ):
                cell = sheet.cell(row=excel_row, column=column)
                if fmt is not None:
                    cell.number_format = fmt
                if name in values and row.get(f"{name}{FLAG_SUFFIX}"):
                    cell.number_format = (fmt or "General") + f'" {row[name + FLAG_SUFFIX]}"'
                    cell.alignment = Alignment(horizontal="right")
                elif cell.value == _NOT_AVAILABLE:
                    cell.alignment = Alignment(horizontal="right")
        sheet.append([])
        for code in sorted(marks):
            sheet.append([f"{code}: {FLAG_CODES.get(code, code)}"])
            sheet.append([f"{_NOT_AVAILABLE}  not shown: {code}, suppressed for reliability"])
        for suffix, meaning in _LEGEND:
            if any(name.endswith(suffix) for name in data):
                sheet.append([f"*{suffix}: {meaning}"])
        sheet.freeze_panes = "A4"
    about = book.create_sheet("about")
    about.append(["statement", "what"])
    about["A1"].font = about["B1"].font = bold
    for what, text in _statement(manifest):
        about.append([what, text])
    about.column_dimensions["A"].width = 24
    about.column_dimensions["B"].width = 100
    return _reproducible(book, str(manifest.get("created_at", "")))


def _reproducible(book: Any, created: str) -> bytes:
    """The workbook's bytes with every date fixed (its properties: the release's creation; the
    zip entries': 1980-01-01), so the same release gives the same file."""
    import datetime
    import zipfile

    from openpyxl.writer.excel import ExcelWriter

    try:
        when = datetime.datetime.fromisoformat(created).replace(tzinfo=None, microsecond=0)
    except ValueError:
        when = datetime.datetime(2000, 1, 1)
    book.properties.created = book.properties.modified = when
    book.properties.creator = "dprelease"
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as archive:
        ExcelWriter(book, archive).save()  # `Workbook.save` would stamp the time of the call
    out = io.BytesIO()
    with zipfile.ZipFile(raw) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            fixed = zipfile.ZipInfo(info.filename, date_time=(1980, 1, 1, 0, 0, 0))
            fixed.compress_type = zipfile.ZIP_DEFLATED
            target.writestr(fixed, source.read(info.filename))
    return out.getvalue()


# --------------------------------------------------------------------------- the files


def _table(stored: Publishable) -> pl.DataFrame:
    return pl.read_parquet(io.BytesIO(stored.table_parquet))


def stored_csv(stored: Publishable) -> bytes:
    return csv_bytes(_table(stored))


def stored_xlsx(stored: Publishable) -> bytes:
    return xlsx_bytes(_table(stored), stored.manifest)


def stored_sdmx(stored: Publishable) -> bytes:
    return sdmx_csv_bytes(_table(stored), stored.manifest)


Encoder = Callable[[Publishable], bytes]
#: How each table format's file is made from the ledger's stored copy.
_WRITERS: dict[str, Encoder] = {
    "parquet": lambda stored: stored.table_parquet,
    "csv": stored_csv,
    "xlsx": stored_xlsx,
    "sdmx": stored_sdmx,
}


def chosen_files(formats: Sequence[str] | None = None) -> dict[str, Encoder]:
    """The table's files in `formats` (default parquet and csv), by file name, in the order of
    `FORMAT_FILES`, and how each is made from the ledger's stored copy."""
    chosen = formats or DEFAULT_FORMATS
    return {FORMAT_FILES[f]: _WRITERS[f] for f in FORMAT_FILES if f in chosen}
