"""The input's declared schema against the row plan: every column the spec reads exists, is a
plain column, and has a dtype its role can use, checked before anything is charged or read;
in a dataset directory, in every file's footer alike."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from dprelease.errors import SchemaError
from dprelease.mechanism.engines._inputs import (
    DataSource,
    Declared,
    withholding_engine_errors,
)
from dprelease.mechanism.engines._plan import RowPlan


def _atomic(dtype: pl.DataType) -> bool:
    return not dtype.is_nested() and dtype != pl.Object


def validate_schema(schema: pl.Schema, plan: RowPlan, declaration: Declared | None = None) -> None:
    """Check every column the plan reads against the declared schema, before anything is
    charged or read; errors name the column and its YAML path, never a value.

    The declaration's untyped columns (a CSV's) take any role and are parsed for it.
    """
    declaration = declaration or Declared()
    hint = declaration.hint
    paths = plan.paths
    missing = next((column for column in paths if column not in schema), None)
    if missing is not None:
        raise SchemaError(missing, "not found in the input", paths[missing])
    for column, path in paths.items():
        if not _atomic(schema[column]):
            raise SchemaError(
                column, f"has dtype {schema[column]}; use a plain column{hint(column)}", path
            )
    text = declaration.untyped
    untyped = set(schema.names()) if text is None else text
    for column, need in plan.needs:
        if not need.fits(schema[column], column in untyped):
            raise SchemaError(column, need.refusal(schema[column]) + hint(column), paths[column])


def validate_dataset(data: DataSource, plan: RowPlan) -> None:
    """When `data` is a local dataset directory, check that every file of it declares each
    column the plan reads, with one dtype: polars and Spark take the schema from one file and
    fail on a file that disagrees only while reading its rows, after the budget is reserved.
    Reads each file's footer (its schema: metadata, no values), never a row; a column of hive
    partitions is in no footer.

    Errors name the column and its dtypes, never a file (a hive partition's path holds a key).
    """
    if not isinstance(data, str | Path) or "://" in str(data) or not Path(data).is_dir():
        return
    files = sorted(f for f in Path(data).rglob("*.parquet") if f.is_file())
    with withholding_engine_errors("reading the footers of the input dataset"):
        footers = [pl.read_parquet_schema(f) for f in files]
    for column, path in plan.paths.items():
        dtypes = list(dict.fromkeys(f[column] for f in footers if column in f))
        if len(dtypes) > 1:
            kinds = " and ".join(str(dtype) for dtype in dtypes)
            raise SchemaError(
                column,
                f"has dtypes {kinds} in different files of the input dataset; write it with one "
                "dtype in every file (e.g. cast it when writing)",
                path,
            )
        if dtypes and not all(column in f for f in footers):
            raise SchemaError(
                column,
                "is missing from some files of the input dataset; write it in every file "
                "(null where there is no value)",
                path,
            )
