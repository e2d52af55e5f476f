"""The input's declared schema against the row plan: every column the spec reads exists, is a
plain column, and has a dtype its role can use, checked before anything is charged or read."""

from __future__ import annotations

import polars as pl

from dprelease.errors import SchemaError
from dprelease.mechanism.engines._inputs import Declared
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
