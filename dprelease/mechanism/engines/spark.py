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

from collections.abc import Mapping
from datetime import date
from typing import Any

import polars as pl
from pyspark.sql import Column, DataFrame, Observation, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.window import WindowSpec

from dprelease.errors import SchemaError
from dprelease.mechanism._accounting import Allocation, Measurement
from dprelease.mechanism.engines import (
    EngineJob,
    ExactAggregates,
    InputSummary,
    columns_read,
    fingerprint,
    summed,
    validate_schema,
    values_read,
    withholding_engine_errors,
)
from dprelease.mechanism.engines._spark_quantiles import grid_point, histograms
from dprelease.mechanism.engines._spark_session import (
    DEFAULT_MASTER,
    MASTER_ENV,
    REMOTE_ENV,
    polars_schema,
    read,
    spark_session,
)
from dprelease.period import Period
from dprelease.spec import ResolvedSpec

#: The fingerprint's hash seed is fixed (not the per-release salt): fingerprints of the same rows
#: must agree across runs. Spark's xxhash64 is stable across versions.
FINGERPRINT_SEED = 0x6470_7265_6C65_6173
FINGERPRINT_SCHEME = "spark-xxhash64-v1"
_SUM = T.DecimalType(38, 0)  # |units| ≤ 2^53 per row and < 2^63 rows: cannot overflow


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


def _clamped(value: Column, lower: float, upper: float) -> Column:
    """The value, null/NaN filled by the nulls rule (0 if within the bounds, else lower),
    clamped to [lower, upper]."""
    fill = 0.0 if lower <= 0.0 <= upper else lower
    number = F.when(value.isNull() | F.isnan(value), F.lit(fill)).otherwise(value)
    return F.least(F.greatest(number, F.lit(lower)), F.lit(upper))


def _units(m: Measurement, read: list[str]) -> Column:
    """What a row adds to `m` in integer units, as the polars engine computes it: the value
    clamped, times the survey weight clamped to [0, W] (a weighted count: the weight alone),
    rounded half to even (as polars' `round`), clamped to the range in units: a BIGINT
    (|units| ≤ 2^53), narrower than the DECIMAL(38,0) sums while rows are shuffled and sorted.
    `read` are the summed columns (`values_read`), the `value{i}` of each."""
    factors = []
    if m.column is not None:
        assert m.lower is not None and m.upper is not None
        factors.append(_clamped(F.col(f"value{read.index(m.column)}"), m.lower, m.upper))
    if m.survey_weight is not None:
        weight = F.col(f"value{read.index(m.survey_weight.column)}")
        factors.append(_clamped(weight, 0.0, m.survey_weight.upper))
    product = factors[0] if len(factors) == 1 else factors[0] * factors[1]
    units = F.rint(product / F.lit(float(m.granularity))).try_cast(T.LongType())
    return F.least(F.greatest(units, F.lit(m.lower_units)), F.lit(m.upper_units))


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


def _salt_frame(session: SparkSession, salt: int) -> DataFrame:
    """The salt as a one-row table: it then never appears in query plans (Spark UI, event logs,
    Connect server logs), as a literal would. Made from Arrow, it is a local relation: a Python
    list would become an RDD whose first use starts Python workers."""
    salts = pl.DataFrame({"salt": [_signed(salt)]}, schema={"salt": pl.Int64})
    return session.createDataFrame(salts.to_arrow(compat_level=pl.CompatLevel.oldest()))


def _bounded(df: DataFrame, loaded: ResolvedSpec) -> DataFrame:
    """Per unit, keep a random choice of rows: ≤ G groups, ≤ R_g rows per group, ≤ R rows.

    `order` is a salted hash of what the row holds, so the rows one unit keeps depend on its own
    rows only; the group order hashes (unit, cell). Positions are running counts, not
    `row_number()`/`dense_rank()`: Spark would apply a rank's `≤ k` before the shuffle too,
    sorting every row once more where units are spread over all partitions, for nothing.
    """
    spec = loaded.spec
    unit = Window.partitionBy("unit")
    if spec.max_groups_per_unit is not None or spec.max_rows_per_group is not None:
        df = df.withColumn("in_group", _position(Window.partitionBy("unit", "cell")))
    if spec.max_groups_per_unit is not None:
        # a group's rank among its unit's groups: how many groups start at or before it in
        # (hash, cell) order (the default RANGE frame takes in the whole group)
        first = F.when(F.col("in_group") == 1, 1).otherwise(0)
        group = unit.orderBy(F.xxhash64("salt", "unit", "cell"), "cell")
        df = _top(df, F.sum(first).over(group), spec.max_groups_per_unit)
    if spec.max_rows_per_group is not None:
        df = df.filter(F.col("in_group") <= spec.max_rows_per_group)
    return _top(df.drop("in_group", "salt"), _position(unit), spec.rows_per_unit)


def _position(window: WindowSpec) -> Column:
    """1, 2, … for a unit's rows in salted-hash order within `window`: a running row count, so
    equal hashes (identical rows) still take distinct places."""
    ordered = window.orderBy("order").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    return F.count(F.lit(1)).over(ordered)


def _top(df: DataFrame, rank: Column, limit: int) -> DataFrame:
    return df.withColumn("rank", rank).filter(F.col("rank") <= limit).drop("rank")


def _selected(frame: DataFrame, loaded: ResolvedSpec, plan: Allocation) -> DataFrame:
    """The columns the spec reads, typed, under internal names (no input column can collide):
    key0…, value0…, period, unit. The aggregation and the input summary both start here."""
    spec = loaded.spec
    schema = frame.schema
    types = {column: _key_types(loaded, column) for column in spec.key_columns}

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
            for i, c in enumerate(values_read(plan))
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


def _summary_metrics(
    selected: DataFrame, loaded: ResolvedSpec, month: Period | None
) -> list[Column]:
    """Aggregates giving one row of private facts for the operator and the ledger (see
    `InputSummary`), over the same typed rows as the aggregation."""
    in_period = _in_period(selected, month)

    def rows_where(condition: Column) -> Column:
        return F.count(F.when(in_period & condition, 1))

    row_hash = F.xxhash64(F.lit(_signed(FINGERPRINT_SEED)), *selected.columns)
    unit_rows = (
        rows_where(F.col("unit").isNotNull())
        if loaded.spec.privacy_unit is not None
        else F.lit(None).cast(T.LongType())
    )
    return [
        F.count(F.lit(1)).alias("input_rows"),
        rows_where(F.lit(True)).alias("period_rows"),
        unit_rows.alias("unit_rows"),
        F.sum(F.when(in_period, row_hash.cast(_SUM))).alias("hash_sum"),
        *(
            rows_where(F.col(f"key{i}").isNotNull()).alias(f"key{i}")
            for i in range(len(loaded.spec.key_columns))
        ),
    ]


def _one_row(selected: DataFrame, metrics: list[Column]) -> dict[str, Any]:
    """The input summary as a job of its own."""
    row = selected.agg(*metrics).first()
    assert row is not None  # a global aggregate has one row
    return row.asDict()


def _observes_exactly(session: SparkSession) -> bool:
    """Whether Spark counts each row once in observed metrics even when it re-runs a task (a lost
    executor, speculation, adaptive re-planning): from Spark 4.3 on, which keeps only each
    task's last successful attempt. Before, the summary takes a pass of its own."""
    major, minor = (int(part) for part in session.version.split(".")[:2])
    return (major, minor) >= (4, 3)


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

    One shuffle, by unit, of rows narrowed to what bounding and the sums need; the salt joins
    as a one-row table (`_salt_frame`).
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
        df = df.crossJoin(F.broadcast(_salt_frame(session, salt)))
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
    read = values_read(plan)
    units = [_units(m, read).alias(f"units{i}") for i, m in enumerate(summed(plan))]
    points = [
        grid_point(
            _clamped(
                F.col(f"value{read.index(q.statistic.column)}"),
                q.statistic.lower,
                q.statistic.upper,
            ),
            q,
        ).alias(f"point{i}")
        for i, q in enumerate(plan.quantiles)
    ]
    bounding = ["unit", "order", "salt"] if spec.privacy_unit is not None else []
    df = df.select(cell.alias("cell"), *units, *points, *bounding)
    if spec.privacy_unit is not None:
        df = _bounded(df, loaded)
    hist = histograms(df, [F.col(f"point{i}") for i in range(len(points))]) if points else None
    sums = [F.sum(F.col(f"units{i}").cast(_SUM)).alias(f"units{i}") for i in range(len(units))]
    return df.groupBy("cell").agg(F.count(F.lit(1)).alias("rows"), *sums), hist


class SparkEngine:
    """Apache Spark (classic or Spark Connect): for inputs beyond one machine."""

    name = "spark"

    def __init__(self, session: SparkSession | None = None) -> None:
        self._session = session  # default: `spark_session()` when an input path is read

    def check(self, job: EngineJob) -> None:
        """Validate the declared schema and let Spark analyse the whole plan; reads no rows."""
        loaded, plan, month = job.resolved, job.allocation, job.period
        with withholding_engine_errors("planning the aggregation on Spark"):
            frame = read(job.data, self._session)
            validate_schema(polars_schema(frame.schema), loaded)
            selected = _selected(frame, loaded, plan)
            cells, hist = _cells(selected, loaded, plan, month, salt=0)
            summary = selected.agg(*_summary_metrics(selected, loaded, month))
            for query in (cells, hist, summary):
                if query is not None:
                    query.schema  # noqa: B018 - analysis only: Spark checks the plan

    def aggregate(self, job: EngineJob, salt: int) -> ExactAggregates:
        """Run the plan on Spark and lay it on the full public key grid, missing groups = 0.

        The input summary is observed on the typed rows as the aggregation reads them: one pass
        over the input. It is a second job where Spark may count a row twice (before 4.3, see
        `_observes_exactly`) and where no row reached the aggregation."""
        loaded, plan, month = job.resolved, job.allocation, job.period
        with withholding_engine_errors(f"aggregating the input of release {loaded.spec.name!r}"):
            selected = _selected(read(job.data, self._session), loaded, plan)
            metrics = _summary_metrics(selected, loaded, month)
            observation = Observation() if _observes_exactly(selected.sparkSession) else None
            rows = selected if observation is None else selected.observe(observation, *metrics)
            cells, hist = _cells(rows, loaded, plan, month, salt)
            table = cells.toArrow()
            points = None if hist is None else pl.DataFrame(pl.from_arrow(hist.toArrow()))
            # No row reached the aggregation: adaptive execution may then have swapped the stage
            # that observed the input for an empty relation, and its metrics are gone with it.
            if observation is not None and table.num_rows > 0:
                summary = observation.get
            else:
                summary = _one_row(selected, metrics)
        observed = pl.DataFrame(pl.from_arrow(table))
        at = observed.get_column("cell")

        def laid_out(column: str) -> pl.Series:
            values = observed.get_column(column).cast(pl.Int128)
            return pl.zeros(loaded.cells, dtype=pl.Int128, eager=True).scatter(at, values)

        column = {m.name: f"units{i}" for i, m in enumerate(summed(plan))}
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
        return ExactAggregates(loaded.key_grid, values, _summary(summary, loaded), counted)

    def summarize(self, job: EngineJob) -> InputSummary:
        """The input summary alone: for a re-run that returns a stored release."""
        loaded = job.resolved
        with withholding_engine_errors(f"reading the input of release {loaded.spec.name!r}"):
            selected = _selected(read(job.data, self._session), loaded, job.allocation)
            row = _one_row(selected, _summary_metrics(selected, loaded, job.period))
        return _summary(row, loaded)


__all__ = [
    "DEFAULT_MASTER",
    "MASTER_ENV",
    "REMOTE_ENV",
    "SparkEngine",
    "polars_schema",
    "read",
    "spark_session",
]
