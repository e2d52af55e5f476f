"""Exact aggregation in polars: confidential rows in, int64 aggregates over the public key grid out.

One lazy plan, one direction: period filter → drop keys outside the public domain → bound each
unit's contributions by a random choice of rows → clamp and discretize → exact int64 group-by →
join onto the full key grid (missing groups are 0). The engine knows polars, not noise or ledgers;
its output never leaves the process without going through `release`.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from dprelease.accounting import Measurement, Plan, check_no_overflow
from dprelease.errors import DataError, DPReleaseError, SchemaError, SpecError
from dprelease.spec import LoadedSpec, StatisticKind

#: What `release` accepts as confidential input; paths are scanned lazily so large files stream.
DataSource = str | Path | pl.DataFrame | pl.LazyFrame | Any  # Any: pandas.DataFrame, pyarrow.Table

_ROWS = "__rows"
_PERIOD = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")


def scan(data: DataSource) -> pl.LazyFrame:
    """Open any supported input as a LazyFrame without reading its rows."""
    if isinstance(data, pl.LazyFrame):
        return data
    if isinstance(data, pl.DataFrame):
        return data.lazy()
    if isinstance(data, str | Path):
        path = Path(data)
        if not path.exists():
            raise FileNotFoundError(f"input data {str(path)!r} not found")
        if path.is_dir() or path.suffix in {".parquet", ".pq"}:
            return pl.scan_parquet(path / "**/*.parquet" if path.is_dir() else path)
        if path.suffix in {".csv", ".txt"}:
            return pl.scan_csv(path)
        raise SchemaError(str(path), "unsupported input format: use parquet or CSV")
    module = type(data).__module__.split(".")[0]
    if module == "pandas":
        return pl.from_pandas(data).lazy()
    if module == "pyarrow":
        return pl.from_arrow(data).lazy()
    raise SchemaError("<input>", f"unsupported input type {type(data).__name__}")


@contextmanager
def _withholding_engine_errors(what: str) -> Iterator[None]:
    """Polars' messages may quote confidential values (a cell that failed to parse, say): keep
    our own typed errors, replace anything else by a message that names only the step."""
    try:
        yield
    except (DPReleaseError, FileNotFoundError):
        raise
    except Exception as exc:  # noqa: BLE001 - the point is to catch whatever the engine raises
        raise DataError(
            f"{what} failed ({type(exc).__name__}); inspect the confidential input inside the "
            "secure environment (the engine's message is withheld: it may quote data)"
        ) from None


def input_schema(data: DataSource) -> pl.Schema:
    """Column names and types of the input; reads no rows (CSV: only what type inference needs)."""
    with _withholding_engine_errors("reading the input's schema"):
        return scan(data).collect_schema()


def _key_dtype_fits(data_dtype: pl.DataType, domain_dtype: pl.DataType) -> bool:
    if domain_dtype == pl.String:
        return data_dtype in (pl.String, pl.Categorical) or isinstance(data_dtype, pl.Enum)
    if domain_dtype.is_integer():
        return data_dtype.is_integer()
    return data_dtype == domain_dtype


def _column_paths(loaded: LoadedSpec) -> dict[str, str]:
    """Where each column the spec reads is declared, for error messages."""
    spec = loaded.spec
    paths = {}
    if spec.privacy_unit is not None:
        paths[spec.privacy_unit] = "release.privacy_unit"
    for i, group in enumerate(spec.group_by):
        for column in group.key_columns:
            paths[column] = f"release.group_by[{i}].{'column' if group.column else 'columns'}"
    for i, stat in enumerate(spec.statistics):
        if stat.column is not None:
            paths.setdefault(stat.column, f"release.statistics[{i}].column")
    if spec.period is not None:
        paths[spec.period.column] = "release.period.column"
    return paths


def validate_schema(schema: pl.Schema, loaded: LoadedSpec, period: str | None) -> None:
    """Check every column the spec needs, before anything is charged or read."""
    spec = loaded.spec
    paths = _column_paths(loaded)
    missing = next((column for column in paths if column not in schema), None)
    if missing is not None:
        raise SchemaError(missing, "not found in the input", paths[missing])
    for column in spec.key_columns:
        domain_dtype = loaded.key_dtype(column)
        if not _key_dtype_fits(schema[column], domain_dtype):
            raise SchemaError(
                column,
                f"has dtype {schema[column]} but its public key domain holds {domain_dtype} keys; "
                "fix the domain or the column",
                paths[column],
            )
    for stat in spec.statistics:
        if stat.column is not None and not schema[stat.column].is_numeric():
            raise SchemaError(
                stat.column,
                f"has dtype {schema[stat.column]} but statistic {stat.name!r} needs a numeric "
                "column",
                paths[stat.column],
            )
    if spec.period is not None:
        column = spec.period.column
        if schema[column] != pl.Date and not isinstance(schema[column], pl.Datetime):
            raise SchemaError(
                column,
                f"has dtype {schema[column]}; a period column needs Date or Datetime",
                paths[column],
            )
        if period is None:
            raise SpecError(
                "period", f"spec {spec.name!r} is released per period: give a period (YYYY-MM)"
            )
        if not _PERIOD.match(period):
            raise SpecError("period", f"{period!r} is not a month of the form YYYY-MM")


@dataclass(frozen=True)
class ExactAggregates:
    """Pre-noise aggregates over the full key grid; internal only, never published as such."""

    grid: pl.DataFrame  # group columns + one int64 column per measurement, in key-grid order

    def values(self, measurement: Measurement) -> pl.Series:
        return self.grid.get_column(measurement.name)


def _salted_hash(expr: pl.Expr) -> pl.Expr:
    """A fresh CSPRNG-salted hash: which rows a unit keeps is random, not file order."""
    return expr.hash(seed=secrets.randbits(64))


def _bound_contributions(lf: pl.LazyFrame, loaded: LoadedSpec) -> pl.LazyFrame:
    spec = loaded.spec
    unit = spec.privacy_unit
    if unit is None:
        return lf  # each row is its own unit: one row, one group
    keys = spec.key_columns
    lf = lf.with_columns(_salted_hash(pl.int_range(pl.len(), dtype=pl.UInt64)).alias("__order"))
    if spec.max_groups_per_unit is not None and keys:
        group_order = _salted_hash(pl.struct(unit, *keys)).rank("dense").over(unit)
        lf = lf.filter(group_order <= spec.max_groups_per_unit)
    if spec.max_rows_per_group is not None and keys:
        lf = lf.filter(
            pl.col("__order").rank("ordinal").over(unit, *keys) <= spec.max_rows_per_group
        )
    return lf.filter(pl.col("__order").rank("ordinal").over(unit) <= spec.max_rows_per_unit)


def _discretized(m: Measurement) -> pl.Expr:
    """Clamp to the declared bounds, then integer units.

    A null or NaN counts as 0 when 0 lies in [lower, upper], else as lower; ±inf is clamped.
    """
    fill = 0.0 if m.lower <= 0.0 <= m.upper else m.lower
    value = pl.col(m.column).cast(pl.Float64).fill_nan(None).fill_null(fill).clip(m.lower, m.upper)
    units = (value / float(m.granularity)).round().cast(pl.Int64)
    return units.clip(m.lower_units, m.upper_units).alias(m.name)


def build_plan(
    data: DataSource, loaded: LoadedSpec, plan: Plan, period: str | None
) -> pl.LazyFrame:
    """The lazy aggregation over observed in-domain groups (validated before it is built)."""
    lf = scan(data)
    validate_schema(input_schema(lf), loaded, period)
    spec = loaded.spec
    keys = spec.key_columns
    sums = [m for m in plan.measurements if m.kind is StatisticKind.SUM]
    needed = {*keys, *(m.column for m in sums)}
    needed |= {spec.privacy_unit} if spec.privacy_unit else set()
    needed |= {spec.period.column} if spec.period else set()
    lf = lf.select(sorted(needed))
    if spec.period is not None and period is not None:
        year, month = (int(part) for part in period.split("-"))
        column = pl.col(spec.period.column)
        lf = lf.filter((column.dt.year() == year) & (column.dt.month() == month))
    lf = lf.with_columns(pl.col(key).cast(loaded.key_dtype(key)) for key in keys)
    for domain in loaded.domains:  # keys outside the public domain (or null) are dropped here
        if domain.width == 1:
            column = domain.columns[0]
            lf = lf.filter(pl.col(column).is_in(domain.get_column(column).implode()))
        else:
            lf = lf.join(domain.lazy(), on=domain.columns, how="semi")
    lf = _bound_contributions(lf, loaded)
    lf = lf.with_columns(_discretized(m) for m in sums)
    aggregations = [pl.len().alias(_ROWS), *(pl.col(m.name).sum() for m in sums)]
    return lf.group_by(keys).agg(aggregations) if keys else lf.select(aggregations)


def aggregate(
    data: DataSource, loaded: LoadedSpec, plan: Plan, period: str | None
) -> ExactAggregates:
    """Run the plan (streaming) and lay it on the full public key grid, missing groups = 0."""
    with _withholding_engine_errors(f"aggregating the input of release {loaded.spec.name!r}"):
        observed = build_plan(data, loaded, plan, period).collect(engine="streaming")
    keys = loaded.spec.key_columns
    grid = loaded.key_grid()
    table = grid.join(observed, on=keys, how="left", maintain_order="left") if keys else observed
    table = table.with_columns(pl.exclude(keys).fill_null(0).cast(pl.Int64))
    rows = int(table.get_column(_ROWS).sum())
    for m in plan.measurements:
        if m.kind is StatisticKind.SUM:
            check_no_overflow(m, rows)
    counts = [
        pl.col(_ROWS).alias(m.name) for m in plan.measurements if m.kind is StatisticKind.COUNT
    ]
    return ExactAggregates(table.with_columns(counts).drop(_ROWS))
