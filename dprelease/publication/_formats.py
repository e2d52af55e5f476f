"""The release's table in the formats readers use.

Each writer is a pure function of the released table (as the ledger stores it) to bytes, so
every run of a slot writes the same bytes, and `publish.write_release_files` writes each file
whole. Numbers are written as they were released: an integral value as an integer (a count's
margin is `16`, never `16.0`), every other one as the float it is.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from dprelease.ledger import StoredRelease

#: Floats up to this size hold every integer exactly, so an integral one is written as one.
_EXACT = 2.0**53


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


def stored_csv(stored: StoredRelease) -> bytes:
    """release.csv from the ledger's stored copy."""
    return csv_bytes(pl.read_parquet(io.BytesIO(stored.table_parquet)))
