"""The Spark engine: the same release semantics (PRIVACY.md), run by PySpark where the data lives.

One direction, as in the polars engine: select the spec's columns under internal names → type
them without ever failing (a value that does not convert is null) → drop rows with a null unit
→ period filter → a broadcast inner join on each public domain, which drops null and
out-of-domain keys and numbers the cell of the key grid → bound each unit's contributions by a
salted hash → clamp and discretize half-to-even → exact count and DECIMAL(38,0) sum per cell.
Only one row per observed cell comes back to the driver, where it is laid on the full key grid
(missing cells are 0). Noise, accounting, ledger and publication stay engine-independent.

Inputs: a parquet file or folder (a local path, or a URI such as s3a://… or hdfs://…), a table
name the session can read, or a Spark DataFrame. Spark's error messages may quote confidential
values, so every failure on the data is re-raised as `DataError` with the message withheld.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import date
from pathlib import Path
from typing import Any

import polars as pl
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from dprelease.errors import ConfigError, SchemaError
from dprelease.mechanism._accounting import Allocation, Measurement
from dprelease.mechanism.engines import (
    DataSource,
    ExactAggregates,
    InputSummary,
    columns_read,
    fingerprint,
    refuse_irregular,
    validate_schema,
    withholding_engine_errors,
)
from dprelease.mechanism.engines._spark_quantiles import grid_point, histograms
from dprelease.period import Period
from dprelease.spec import ResolvedSpec, StatisticKind

#: Spark Connect URL (sc://host:15002): releases run on that Spark Connect server.
REMOTE_ENV = "DPRELEASE_SPARK_REMOTE"
#: Spark master (spark://host:7077, yarn, k8s://…, local[4]) for a classic session.
MASTER_ENV = "DPRELEASE_SPARK_MASTER"
DEFAULT_MASTER = "local[2]"

#: The fingerprint's hash seed is fixed (not the per-release salt): fingerprints of the same rows
#: must agree across runs. Spark's xxhash64 is stable across versions.
FINGERPRINT_SEED = 0x6470_7265_6C65_6173
FINGERPRINT_SCHEME = "spark-xxhash64-v1"
_SUM = T.DecimalType(38, 0)  # |units| ≤ 2^53 per row and < 2^63 rows: cannot overflow


def spark_session(
    *,
    remote: str | None = None,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """The session Spark releases run on, for the CLI, pipelines and tests alike.

    Spark Connect when a remote URL is given (argument, else $DPRELEASE_SPARK_REMOTE); otherwise a
    classic session on `master` (argument, else $DPRELEASE_SPARK_MASTER, else local[2]). As with
    Spark's own getOrCreate, a session already running in this process is reused, so a resource
    or a notebook that started one decides where releases run.
    """
    remote = remote or os.environ.get(REMOTE_ENV)
    builder = SparkSession.builder.appName("dprelease")
    if remote:
        builder = builder.remote(remote)
    else:
        builder = builder.master(master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    try:
        return builder.getOrCreate()
    except Exception as exc:  # noqa: BLE001 - whatever stops Spark from starting
        raise ConfigError(
            REMOTE_ENV if remote else MASTER_ENV,
            f"could not start a Spark session ({type(exc).__name__}); check Java 17+ and the "
            "Spark URL",
        ) from exc


def read(data: DataSource, session: SparkSession | None = None) -> DataFrame:
    """Open the input lazily. A string or path is parquet when it is a URI, exists locally or
    ends in .parquet/.pq; otherwise it names a table (e.g. `db.visits`)."""
    if isinstance(data, DataFrame):
        return data
    if not isinstance(data, str | Path):
        kind = f"{type(data).__module__}.{type(data).__qualname__}"
        raise SchemaError("<input>", f"the spark engine reads parquet, a table or a Spark "
                          f"DataFrame, not {kind}")  # fmt: skip
    text = str(data)
    local = Path(text)
    if local.suffix in {".csv", ".txt"}:
        raise SchemaError(text, "unsupported input format for the spark engine: use parquet")
    if "://" not in text and local.exists() and not local.is_dir():
        refuse_irregular(local)
    spark = session or spark_session()
    if "://" in text or local.exists():
        return spark.read.parquet(text)
    if local.suffix in {".parquet", ".pq"} or "/" in text or os.sep in text:
        raise FileNotFoundError(f"input data {text!r} not found")
    return spark.read.table(text)


_POLARS_TYPES: dict[type[T.DataType], pl.DataType] = {
    T.StringType: pl.String(),
    T.VarcharType: pl.String(),
    T.CharType: pl.String(),
    T.BooleanType: pl.Boolean(),
    T.ByteType: pl.Int8(),
    T.ShortType: pl.Int16(),
    T.IntegerType: pl.Int32(),
    T.LongType: pl.Int64(),
    T.FloatType: pl.Float32(),
    T.DoubleType: pl.Float64(),
    T.DateType: pl.Date(),
    T.TimestampNTZType: pl.Datetime("us"),
    T.TimestampType: pl.Datetime("us", "UTC"),
    T.BinaryType: pl.Binary(),
    T.NullType: pl.Null(),
}


def polars_schema(schema: T.StructType) -> pl.Schema:
    """A Spark schema in polars types, for the schema check both engines share; a type no key,
    value or period can use (arrays, maps, intervals, …) becomes Object, which it refuses."""

    def convert(dtype: T.DataType) -> pl.DataType:
        if isinstance(dtype, T.DecimalType):
            return pl.Decimal(dtype.precision, dtype.scale)
        return _POLARS_TYPES.get(type(dtype), pl.Object())

    return pl.Schema({field.name: convert(field.dataType) for field in schema.fields})


def _column(name: str) -> Column:
    return F.col("`" + name.replace("`", "``") + "`")


def _key_types(loaded: ResolvedSpec, column: str) -> tuple[pl.DataType, T.DataType]:
    """How a key column's domain travels to Spark (polars dtype) and compares there (Spark type):
    every integer type as BIGINT (a key outside BIGINT is in no integer domain's data either)."""
    dtype = loaded.key_dtype(column)
    if dtype.is_integer():
        return pl.Int64(), T.LongType()
    if dtype.is_float():
        return pl.Float64(), T.DoubleType()
    if isinstance(dtype, pl.Decimal):
        return dtype, T.DecimalType(dtype.precision or 38, dtype.scale or 0)
    if isinstance(dtype, pl.Datetime):
        if dtype.time_zone is None:
            return pl.Datetime("us"), T.TimestampNTZType()
        return pl.Datetime("us", "UTC"), T.TimestampType()
    if dtype in (pl.String, pl.Categorical) or isinstance(dtype, pl.Enum):
        return pl.String(), T.StringType()
    if dtype in (pl.Boolean, pl.Date):
        return dtype, T.BooleanType() if dtype == pl.Boolean else T.DateType()
    raise SchemaError(
        column,
        f"its public key domain holds {dtype} keys, which the spark engine cannot compare; use "
        "integer, text, boolean, date or timestamp keys",
        columns_read(loaded)[column],
    )


def _integer_range(dtype: pl.DataType) -> tuple[int, int]:
    """The values an integer domain's dtype holds, within BIGINT."""
    bits = {pl.Int8: 8, pl.Int16: 16, pl.Int32: 32, pl.UInt8: 8, pl.UInt16: 16, pl.UInt32: 32}
    width = next((b for t, b in bits.items() if dtype == t), 64)
    if dtype.is_unsigned_integer():
        return 0, min(2**width - 1, 2**63 - 1)
    return -(2 ** (width - 1)), 2 ** (width - 1) - 1


def _integral(source: T.DataType) -> bool:
    """Integer types, and DECIMAL(p, 0), which is how Spark reads parquet UINT64."""
    return isinstance(source, T.IntegralType) or (
        isinstance(source, T.DecimalType) and source.scale == 0
    )


def _number(column: Column, source: T.DataType, target: T.DataType) -> Column:
    """A number as `target` (BIGINT or DOUBLE); null where the column holds no numbers."""
    if isinstance(source, T.NumericType):
        return column.try_cast(target)
    return F.lit(None).cast(target)


def _as_key(column: Column, source: T.DataType, target: T.DataType) -> Column:
    """A key typed as its domain's keys; whatever does not convert exactly becomes null: an
    integer domain takes integral numbers only (1.0 is 1, 1.5 no key). Spark columns have
    declared types, so text is never parsed (the schema check refuses text for numeric roles,
    as it does for parquet in the polars engine)."""
    if source == target:
        return column
    if isinstance(source, T.NullType):
        return F.lit(None).cast(target)
    if isinstance(target, T.LongType) and not _integral(source):
        number = _number(column, source, T.DoubleType())
        whole = number.try_cast(target)
        return F.when(whole == number, whole)
    if isinstance(target, T.LongType | T.DoubleType):
        return _number(column, source, target)
    return column.try_cast(target)


def _as_date(column: Column, source: T.DataType) -> Column:
    """Date or timestamp as is; a column of nulls is in no month."""
    if isinstance(source, T.DateType | T.TimestampType | T.TimestampNTZType):
        return column
    return F.lit(None).cast(T.DateType())


def _in_month(period: Column, dtype: T.DataType, month: Period) -> Column:
    """Rows dated within the month, as range bounds (parquet row groups of other months are
    skipped). Timestamps with a time zone are cut at UTC midnight."""
    start = date(month.year, month.month, 1)
    end = date(month.year + month.month // 12, month.month % 12 + 1, 1)
    if isinstance(dtype, T.TimestampType):
        low, high = (F.timestamp_seconds(F.lit(_epoch_seconds(day))) for day in (start, end))
    elif isinstance(dtype, T.TimestampNTZType):
        low, high = (F.lit(day).cast(dtype) for day in (start, end))
    else:
        low, high = F.lit(start), F.lit(end)
    return (period >= low) & (period < high)


def _epoch_seconds(day: date) -> int:
    return (day - date(1970, 1, 1)).days * 86_400


def _units(value: Column, m: Measurement) -> Column:
    """The value as a number, null/NaN filled by the nulls rule, clamped, in integer units
    (round half to even, as polars' `round`)."""
    assert m.lower is not None and m.upper is not None
    fill = 0.0 if m.lower <= 0.0 <= m.upper else m.lower
    number = F.when(value.isNull() | F.isnan(value), F.lit(fill)).otherwise(value)
    number = F.least(F.greatest(number, F.lit(m.lower)), F.lit(m.upper))
    units = F.rint(number / F.lit(float(m.granularity))).try_cast(T.LongType())
    return F.least(F.greatest(units, F.lit(m.lower_units)), F.lit(m.upper_units)).cast(_SUM)


def _sums(plan: Allocation) -> list[Measurement]:
    return [m for m in plan.measurements if m.kind is StatisticKind.SUM]


def _values_read(plan: Allocation) -> list[str]:
    """The columns whose values are read (summed, or a quantile's), each once."""
    quantiles = [q.statistic.column for q in plan.quantiles]
    return list(dict.fromkeys([*(str(m.column) for m in _sums(plan)), *quantiles]))


def _domain_frame(
    session: SparkSession,
    domain: pl.DataFrame,
    names: list[str],
    types: list[tuple[pl.DataType, T.DataType]],
) -> DataFrame:
    """A public domain on Spark: its keys under internal `names`, and their position."""
    keys = domain.select(
        *(
            pl.col(column).cast(polars_type).alias(name)
            for column, name, (polars_type, _) in zip(domain.columns, names, types, strict=True)
        ),
        pl.int_range(pl.len(), dtype=pl.Int64).alias("index"),
    )
    frame = session.createDataFrame(keys.to_arrow(compat_level=pl.CompatLevel.oldest()))
    return frame.select(
        *(F.col(n).cast(t).alias(n) for n, (_, t) in zip(names, types, strict=True)), "index"
    )


def _signed(salt: int) -> int:
    """The 64-bit salt as a BIGINT."""
    return salt - 2**64 if salt >= 2**63 else salt


def _bounded(df: DataFrame, loaded: ResolvedSpec) -> DataFrame:
    """Per unit, keep a random choice of rows: ≤ G groups, ≤ R_g rows per group, ≤ R rows.

    `order` is a salted hash of what the row holds, so the rows one unit keeps depend on its own
    rows only; the group order hashes (unit, cell). Spark applies each `≤ k` per partition before
    its shuffle as well.
    """
    spec = loaded.spec
    unit = Window.partitionBy("unit")
    if spec.max_groups_per_unit is not None:
        group = F.xxhash64("salt", "unit", "cell")
        df = _top(df, F.dense_rank().over(unit.orderBy(group, "cell")), spec.max_groups_per_unit)
    df = df.drop("salt")
    if spec.max_rows_per_group is not None:
        by_group = Window.partitionBy("unit", "cell").orderBy("order")
        df = _top(df, F.row_number().over(by_group), spec.max_rows_per_group)
    return _top(df, F.row_number().over(unit.orderBy("order")), spec.rows_per_unit)


def _top(df: DataFrame, rank: Column, limit: int) -> DataFrame:
    return df.withColumn("rank", rank).filter(F.col("rank") <= limit).drop("rank")


def _selected(frame: DataFrame, loaded: ResolvedSpec, plan: Allocation) -> DataFrame:
    """The columns the spec reads, typed, under internal names (no input column can collide):
    key0…, value0…, period, unit. The aggregation and the input summary both start here."""
    spec = loaded.spec
    schema = frame.schema
    types = {column: _key_types(loaded, column) for column in spec.key_columns}
    summed = _values_read(plan)

    def key(column: str) -> Column:
        typed = _as_key(_column(column), schema[column].dataType, types[column][1])
        domain = loaded.key_dtype(column)
        if not domain.is_integer():
            return typed
        low, high = _integer_range(domain)  # as a non-strict cast to a narrow dtype: else null
        return F.when(typed.between(low, high), typed)

    selected = [
        *(key(c).alias(f"key{i}") for i, c in enumerate(spec.key_columns)),
        *(
            _number(_column(c), schema[c].dataType, T.DoubleType()).alias(f"value{i}")
            for i, c in enumerate(summed)
        ),
    ]
    if spec.period is not None:
        period = spec.period.column
        selected.append(_as_date(_column(period), schema[period].dataType).alias("period"))
    if spec.privacy_unit is not None:  # a float unit is made NaN-free: nulls are one test
        unit = _column(spec.privacy_unit)
        if isinstance(schema[spec.privacy_unit].dataType, T.FloatType | T.DoubleType):
            unit = F.when(~F.isnan(unit), unit)
        selected.append(unit.alias("unit"))
    return frame.select(*selected)


def _in_period(selected: DataFrame, month: Period | None) -> Column:
    if month is None:
        return F.lit(True)
    return F.coalesce(
        _in_month(F.col("period"), selected.schema["period"].dataType, month), F.lit(False)
    )


def _summary_frame(selected: DataFrame, loaded: ResolvedSpec, month: Period | None) -> DataFrame:
    """One row of private facts for the operator and the ledger (see `InputSummary`), from the
    same typed rows as the aggregation."""
    in_period = _in_period(selected, month)

    def rows_where(condition: Column) -> Column:
        return F.count(F.when(in_period & condition, 1))

    row_hash = F.xxhash64(F.lit(_signed(FINGERPRINT_SEED)), *selected.columns)
    unit_rows = (
        rows_where(F.col("unit").isNotNull())
        if loaded.spec.privacy_unit is not None
        else F.lit(None).cast(T.LongType())
    )
    return selected.agg(
        F.count(F.lit(1)).alias("input_rows"),
        rows_where(F.lit(True)).alias("period_rows"),
        unit_rows.alias("unit_rows"),
        F.sum(F.when(in_period, row_hash.cast(_SUM))).alias("hash_sum"),
        *(
            rows_where(F.col(f"key{i}").isNotNull()).alias(f"key{i}")
            for i in range(len(loaded.spec.key_columns))
        ),
    )


def _summary(row: Mapping[str, Any], loaded: ResolvedSpec) -> InputSummary:
    period_rows = int(row["period_rows"])
    return InputSummary(
        rows=int(row["input_rows"]),
        period_rows=period_rows,
        unit_rows=None if row["unit_rows"] is None else int(row["unit_rows"]),
        keyed_rows={c: int(row[f"key{i}"]) for i, c in enumerate(loaded.spec.key_columns)},
        fingerprint=fingerprint(FINGERPRINT_SCHEME, period_rows, int(row["hash_sum"] or 0)),
    )


def _cells(
    selected: DataFrame, loaded: ResolvedSpec, plan: Allocation, month: Period | None, salt: int
) -> tuple[DataFrame, DataFrame | None]:
    """The lazy aggregation: one row (cell, rows, units0, units1, …) per observed cell; with
    quantiles, also one row (cell, statistic, point, rows) per observed grid point (a second
    job over the same kept rows).

    The salt joins as a one-row table rather than as a literal, so it never appears in query
    plans (Spark UI, event logs, Connect server logs).
    """
    spec = loaded.spec
    session = selected.sparkSession
    df = selected
    if spec.privacy_unit is not None:  # never one shared allowance for all unknown units
        df = df.filter(F.col("unit").isNotNull())
    if month is not None:
        df = df.filter(_in_period(df, month))
    if spec.privacy_unit is not None:  # the row's order: a salted hash of all it holds
        row = df.columns
        df = df.crossJoin(F.broadcast(session.createDataFrame([(_signed(salt),)], "salt long")))
        df = df.withColumn("order", F.xxhash64("salt", *row))
    keys = {column: f"key{i}" for i, column in enumerate(spec.key_columns)}
    cell, stride = F.lit(0).cast(T.LongType()), 1
    for group, domain in reversed(list(zip(spec.group_by, loaded.domains, strict=True))):
        names = [keys[column] for column in group.key_columns]
        types = [_key_types(loaded, column) for column in group.key_columns]
        domain_frame = F.broadcast(_domain_frame(session, domain, names, types))
        # an inner join on unique public keys: drops null and out-of-domain keys, numbers the cell
        df = df.join(domain_frame, on=names, how="inner")
        df = df.withColumn("cell", cell + F.col("index") * stride).drop("index", *names)
        cell, stride = F.col("cell"), stride * domain.height
    if not keys:
        df = df.withColumn("cell", cell)
    if spec.privacy_unit is not None:
        df = _bounded(df, loaded)
    value = _values_read(plan).index
    units = [
        _units(F.col(f"value{value(str(m.column))}"), m).alias(f"units{i}")
        for i, m in enumerate(_sums(plan))
    ]
    points = [grid_point(F.col(f"value{value(q.statistic.column)}"), q) for q in plan.quantiles]
    hist = histograms(df, points) if points else None
    df = df.select("cell", *units)
    return df.groupBy("cell").agg(
        F.count(F.lit(1)).alias("rows"), *(F.sum(u).alias(u) for u in df.columns[1:])
    ), hist


class SparkEngine:
    """Apache Spark (classic or Spark Connect): for inputs beyond one machine."""

    name = "spark"

    def __init__(self, session: SparkSession | None = None) -> None:
        self._session = session  # default: `spark_session()` when an input path is read

    def check(
        self, data: DataSource, loaded: ResolvedSpec, plan: Allocation, month: Period | None
    ) -> None:
        """Validate the declared schema and let Spark analyse the whole plan; reads no rows."""
        with withholding_engine_errors("planning the aggregation on Spark"):
            frame = read(data, self._session)
            validate_schema(polars_schema(frame.schema), loaded)
            selected = _selected(frame, loaded, plan)
            cells, hist = _cells(selected, loaded, plan, month, salt=0)
            for query in (cells, hist, _summary_frame(selected, loaded, month)):
                _ = query is not None and query.schema  # analysis only: Spark checks the plan

    def aggregate(
        self,
        data: DataSource,
        loaded: ResolvedSpec,
        plan: Allocation,
        month: Period | None,
        salt: int,
    ) -> ExactAggregates:
        """Run the plan on Spark and lay it on the full public key grid, missing groups = 0.

        The input summary is a second, small Spark job over the same typed rows."""
        with withholding_engine_errors(f"aggregating the input of release {loaded.spec.name!r}"):
            selected = _selected(read(data, self._session), loaded, plan)
            cells, hist = _cells(selected, loaded, plan, month, salt)
            table, points = cells.toArrow(), None if hist is None else pl.DataFrame(hist.toArrow())
            summary = _summary_frame(selected, loaded, month).first()
        assert summary is not None  # a global aggregate has one row
        observed = pl.DataFrame(pl.from_arrow(table))
        at = observed.get_column("cell")

        def laid_out(column: str) -> pl.Series:
            values = observed.get_column(column).cast(pl.Int128)
            return pl.zeros(loaded.cells, dtype=pl.Int128, eager=True).scatter(at, values)

        column = {m.name: f"units{i}" for i, m in enumerate(_sums(plan))}
        values = {
            m.name: laid_out(column.get(m.name, "rows")).alias(m.name) for m in plan.measurements
        }
        counted = {
            q.statistic.name: points.filter(pl.col("statistic") == i).select(
                pl.col(name).cast(pl.Int64) for name in ("cell", "point", "rows")
            )
            for i, q in enumerate(plan.quantiles)
            if points is not None
        }
        return ExactAggregates(loaded.key_grid, values, _summary(summary.asDict(), loaded), counted)

    def summarize(
        self, data: DataSource, loaded: ResolvedSpec, plan: Allocation, month: Period | None
    ) -> InputSummary:
        """The input summary alone: for a re-run that returns a stored release."""
        with withholding_engine_errors(f"reading the input of release {loaded.spec.name!r}"):
            selected = _selected(read(data, self._session), loaded, plan)
            row = _summary_frame(selected, loaded, month).first()
        assert row is not None
        return _summary(row.asDict(), loaded)
