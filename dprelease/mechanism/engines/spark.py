"""The Spark engine: the same release semantics (PRIVACY.md), run by PySpark where the data lives.

It translates the row plan (`_plan.RowPlan`), one direction, as the polars engine does: select
the plan's columns under internal names → type
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

import numpy as np
import polars as pl
from pyspark.sql import Column, DataFrame, Observation, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.window import WindowSpec

from dprelease.errors import DataError, SchemaError
from dprelease.mechanism.engines import _spark_selection
from dprelease.mechanism.engines._contract import (
    EngineJob,
    ExactAggregates,
    InputSummary,
    fingerprint,
)
from dprelease.mechanism.engines._inputs import withholding_engine_errors
from dprelease.mechanism.engines._plan import (
    Bounding,
    DistinctUnits,
    GridPoint,
    InCategories,
    Number,
    RowPlan,
    Units,
)
from dprelease.mechanism.engines._schema import validate_schema
from dprelease.mechanism.engines._spark_session import (
    DEFAULT_MASTER,
    MASTER_ENV,
    REMOTE_ENV,
    polars_schema,
    read,
    spark_session,
)
from dprelease.period import Period

#: The fingerprint's hash seed is fixed (not the per-release salt): fingerprints of the same rows
#: must agree across runs. Spark's xxhash64 is stable across versions.
FINGERPRINT_SEED = 0x6470_7265_6C65_6173
FINGERPRINT_SCHEME = "spark-xxhash64-v1"
_SUM = T.DecimalType(38, 0)  # |units| ≤ 2^53 per row and < 2^63 rows: cannot overflow


def _column(name: str) -> Column:
    return F.col("`" + name.replace("`", "``") + "`")


def _key_types(plan: RowPlan, column: str) -> tuple[pl.DataType, T.DataType]:
    """How a key column's domain travels to Spark (polars dtype) and compares there (Spark type):
    every integer type as BIGINT (a key outside BIGINT is in no integer domain's data either)."""
    dtype = plan.resolved.key_dtype(column)
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
        plan.paths[column],
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


def _value(number: Number) -> Column:
    """A value column as a number: null or NaN → the plan's fill (the nulls rule), clamped."""
    value = F.col(f"value{number.read}")
    filled = F.when(value.isNull() | F.isnan(value), F.lit(number.fill)).otherwise(value)
    return F.least(F.greatest(filled, F.lit(number.lower)), F.lit(number.upper))


def _in_categories(term: InCategories, plan: RowPlan) -> Column:
    """1.0 where the column holds one of the categories (as numbers or as text), else 0.0."""
    column = F.col(f"category{plan.categories.index(term.column)}")
    typed = column.try_cast(T.DoubleType() if term.numeric else T.StringType())
    return F.when(typed.isin(list(term.categories)), F.lit(1.0)).otherwise(F.lit(0.0))


def _units(units: Units, plan: RowPlan) -> Column:
    """What a row adds to a sum in integer units, as the polars engine computes it: the product
    of its factors, rounded half to even (as polars' `round`), clamped to the range in units: a
    BIGINT (|units| ≤ 2^53), narrower than the DECIMAL(38,0) sums while rows are shuffled and
    sorted."""
    factors = [
        _value(f) if isinstance(f, Number) else _in_categories(f, plan) for f in units.factors
    ]
    product = factors[0] if len(factors) == 1 else factors[0] * factors[1]
    rounded = F.rint(product / F.lit(units.granularity)).try_cast(T.LongType())
    return F.least(F.greatest(rounded, F.lit(units.lower_units)), F.lit(units.upper_units))


def _grid_point(point: GridPoint) -> Column:
    """The grid index of a value, as the polars engine computes it: (x − lower)/resolution in
    float64, rounded half to even (`rint`), clamped to 0 … B − 1."""
    steps = F.rint((_value(point.number) - F.lit(point.lower)) / F.lit(point.resolution))
    return F.least(F.greatest(steps.try_cast(T.LongType()), F.lit(0)), F.lit(point.bins - 1))


def _histograms(bounded: DataFrame, points: list[Column]) -> DataFrame:
    """Rows per observed (histogram index, cell, grid point): one shuffle for every histogram,
    each kept row counted once per histogram."""
    pairs = F.array(
        *(F.struct(F.lit(i).alias("statistic"), p.alias("point")) for i, p in enumerate(points))
    )
    exploded = bounded.select("cell", F.explode(pairs).alias("pair"))
    return exploded.groupBy("cell", "pair.statistic", "pair.point").agg(
        F.count(F.lit(1)).alias("rows")
    )


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


def _bounded(df: DataFrame, bounding: Bounding) -> DataFrame:
    """Per unit, keep a random choice of rows: ≤ G groups, ≤ R_g rows per group, ≤ R rows.

    `order` is a salted hash of what the row holds, so the rows one unit keeps depend on its own
    rows only; the group order hashes (unit, cell). Positions are running counts, not
    `row_number()`/`dense_rank()`: Spark would apply a rank's `≤ k` before the shuffle too,
    sorting every row once more where units are spread over all partitions, for nothing.
    """
    unit = Window.partitionBy("unit")
    if bounding.groups is not None or bounding.rows_per_group is not None:
        df = df.withColumn("in_group", _position(Window.partitionBy("unit", "cell")))
    if bounding.groups is not None:
        # a group's rank among its unit's groups: how many groups start at or before it in
        # (hash, cell) order (the default RANGE frame takes in the whole group)
        first = F.when(F.col("in_group") == 1, 1).otherwise(0)
        group = unit.orderBy(F.xxhash64("salt", "unit", "cell"), "cell")
        df = _top(df, F.sum(first).over(group), bounding.groups)
    if bounding.rows_per_group is not None:
        df = df.filter(F.col("in_group") <= bounding.rows_per_group)
    return _top(df.drop("in_group", "salt"), _position(unit), bounding.rows)


def _position(window: WindowSpec) -> Column:
    """1, 2, … for a unit's rows in salted-hash order within `window`: a running row count, so
    equal hashes (identical rows) still take distinct places."""
    ordered = window.orderBy("order").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    return F.count(F.lit(1)).over(ordered)


def _top(df: DataFrame, rank: Column, limit: int) -> DataFrame:
    return df.withColumn("rank", rank).filter(F.col("rank") <= limit).drop("rank")


def _selected(frame: DataFrame, plan: RowPlan) -> DataFrame:
    """The columns the plan reads, typed, under internal names (no input column can collide):
    key0…, value0…, period, unit. The aggregation and the input summary both start here."""
    schema = frame.schema
    types = {column: _key_types(plan, column) for column in plan.key_columns}

    def key(column: str) -> Column:
        typed = _as_key(_column(column), schema[column].dataType, types[column][1])
        domain = plan.resolved.key_dtype(column)
        if not domain.is_integer():
            return typed
        low, high = _integer_range(domain)  # as a non-strict cast to a narrow dtype: else null
        return F.when(typed.between(low, high), typed)

    selected = [
        *(key(c).alias(f"key{i}") for i, c in enumerate(plan.key_columns)),
        *(
            _number(_column(c), schema[c].dataType, T.DoubleType()).alias(f"value{i}")
            for i, c in enumerate(plan.reads)
        ),
        *(_column(c).alias(f"category{i}") for i, c in enumerate(plan.categories)),
    ]
    if plan.period_column is not None:
        period = plan.period_column
        selected.append(_as_date(_column(period), schema[period].dataType).alias("period"))
    if plan.unit is not None:  # a float unit is made NaN-free: nulls are one test
        unit = _column(plan.unit)
        if isinstance(schema[plan.unit].dataType, T.FloatType | T.DoubleType):
            unit = F.when(~F.isnan(unit), unit)
        selected.append(unit.alias("unit"))
    return frame.select(*selected)


def _in_period(selected: DataFrame, month: Period | None) -> Column:
    if month is None:
        return F.lit(True)
    return F.coalesce(
        _in_month(F.col("period"), selected.schema["period"].dataType, month), F.lit(False)
    )


def _summary_metrics(selected: DataFrame, plan: RowPlan) -> list[Column]:
    """Aggregates giving one row of private facts for the operator and the ledger (see
    `InputSummary`), over the same typed rows as the aggregation."""
    in_period = _in_period(selected, plan.period)

    def rows_where(condition: Column) -> Column:
        return F.count(F.when(in_period & condition, 1))

    row_hash = F.xxhash64(F.lit(_signed(FINGERPRINT_SEED)), *selected.columns)
    unit_rows = (
        rows_where(F.col("unit").isNotNull())
        if plan.unit is not None
        else F.lit(None).cast(T.LongType())
    )
    return [
        F.count(F.lit(1)).alias("input_rows"),
        rows_where(F.lit(True)).alias("period_rows"),
        unit_rows.alias("unit_rows"),
        F.sum(F.when(in_period, row_hash.cast(_SUM))).alias("hash_sum"),
        *(
            rows_where(F.col(f"key{i}").isNotNull()).alias(f"key{i}")
            for i in range(len(plan.key_columns))
        ),
    ]


def _one_row(selected: DataFrame, metrics: list[Column]) -> dict[str, Any]:
    """The input summary as a job of its own."""
    row = selected.agg(*metrics).first()
    if row is None:  # a global aggregate has one row
        raise DataError("the input summary's aggregate returned no row")
    return row.asDict()


def _observes_exactly(session: SparkSession) -> bool:
    """Whether Spark counts each row once in observed metrics even when it re-runs a task (a lost
    executor, speculation, adaptive re-planning): from Spark 4.3 on, which keeps only each
    task's last successful attempt. Before, the summary takes a pass of its own."""
    major, minor = (int(part) for part in session.version.split(".")[:2])
    return (major, minor) >= (4, 3)


def _summary(row: Mapping[str, Any], plan: RowPlan) -> InputSummary:
    period_rows = int(row["period_rows"])
    return InputSummary(
        rows=int(row["input_rows"]),
        period_rows=period_rows,
        unit_rows=None if row["unit_rows"] is None else int(row["unit_rows"]),
        keyed_rows={c: int(row[f"key{i}"]) for i, c in enumerate(plan.key_columns)},
        fingerprint=fingerprint(FINGERPRINT_SCHEME, period_rows, int(row["hash_sum"] or 0)),
    )


def _cells(selected: DataFrame, plan: RowPlan, salt: int) -> tuple[DataFrame, DataFrame | None]:
    """The lazy aggregation: one row (cell, rows, units0, units1, …) per observed cell; with
    histograms, also one row (cell, statistic, point, rows) per observed grid point (a second
    job over the same kept rows).

    One shuffle, by unit, of rows narrowed to what bounding and the sums need; the salt joins
    as a one-row table (`_salt_frame`).
    """
    spec = plan.resolved.spec
    session = selected.sparkSession
    bounding = plan.bounding
    df = selected
    if bounding is not None:  # never one shared allowance for all unknown units
        df = df.filter(F.col("unit").isNotNull())
    if plan.period is not None:
        df = df.filter(_in_period(df, plan.period))
    if bounding is not None:  # the row's order: a salted hash of all it holds
        row = df.columns
        df = df.crossJoin(F.broadcast(_salt_frame(session, salt)))
        df = df.withColumn("order", F.xxhash64("salt", *row))
    keys = {column: f"key{i}" for i, column in enumerate(plan.key_columns)}
    cell, stride = F.lit(0).cast(T.LongType()), 1
    for group, domain in reversed(list(zip(spec.group_by, plan.resolved.domains, strict=True))):
        names = [keys[column] for column in group.key_columns]
        types = [_key_types(plan, column) for column in group.key_columns]
        domain_frame = F.broadcast(_domain_frame(session, domain, names, types))
        # an inner join on unique public keys: drops null and out-of-domain keys, numbers the cell
        df = df.join(domain_frame, on=names, how="inner")
        df = df.withColumn("cell", cell + F.col("index") * stride).drop("index", *names)
        cell, stride = F.col("cell"), stride * domain.height
    units = [_units(u, plan).alias(f"units{i}") for i, u in enumerate(plan.sums)]
    points = [_grid_point(g).alias(f"point{i}") for i, g in enumerate(plan.histograms)]
    bounding_columns = ["unit", "order", "salt"] if bounding is not None else []
    df = df.select(cell.alias("cell"), *units, *points, *bounding_columns)
    if bounding is not None:
        df = _bounded(df, bounding)
    hist = _histograms(df, [F.col(f"point{i}") for i in range(len(points))]) if points else None
    sums = [F.sum(F.col(f"units{i}").cast(_SUM)).alias(f"units{i}") for i in range(len(units))]
    return df.groupBy("cell").agg(F.count(F.lit(1)).alias("rows"), *sums), hist


class SparkEngine:
    """Apache Spark (classic or Spark Connect): for inputs beyond one machine."""

    name = "spark"

    def __init__(self, session: SparkSession | None = None) -> None:
        self._session = session  # default: `spark_session()` when an input path is read

    def check(self, job: EngineJob) -> None:
        """Validate the declared schema and let Spark analyse the whole plan; reads no rows."""
        plan = job.plan
        with withholding_engine_errors("planning the aggregation on Spark"):
            frame = read(job.data, self._session)
            validate_schema(polars_schema(frame.schema), plan)
            selected = _selected(frame, plan)
            cells, hist = _cells(selected, plan, salt=0)
            summary = selected.agg(*_summary_metrics(selected, plan))
            for query in (cells, hist, summary):
                if query is not None:
                    query.schema  # noqa: B018 - analysis only: Spark checks the plan
            for term in plan.selections:  # key selection's aggregate, typed on no rows
                _spark_selection.distinct_units(selected.limit(0), plan, term, salt=0)

    def distinct_units(
        self, job: EngineJob, term: DistinctUnits, salt: int
    ) -> tuple[pl.DataFrame, np.ndarray]:
        """Key selection's aggregate of one selected entry (`_spark_selection`)."""
        plan = job.plan
        with withholding_engine_errors(f"selecting the keys of release {plan.name!r}"):
            selected = _selected(read(job.data, self._session), plan)
            return _spark_selection.distinct_units(selected, plan, term, salt)

    def aggregate(self, job: EngineJob, salt: int) -> ExactAggregates:
        """Run the plan on Spark and lay it on the full public key grid, missing groups = 0.

        The input summary is observed on the typed rows as the aggregation reads them: one pass
        over the input. It is a second job where Spark may count a row twice (before 4.3, see
        `_observes_exactly`) and where no row reached the aggregation."""
        plan = job.plan
        with withholding_engine_errors(f"aggregating the input of release {plan.name!r}"):
            selected = _selected(read(job.data, self._session), plan)
            metrics = _summary_metrics(selected, plan)
            observation = Observation() if _observes_exactly(selected.sparkSession) else None
            rows = selected if observation is None else selected.observe(observation, *metrics)
            cells, hist = _cells(rows, plan, salt)
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
            return pl.zeros(plan.resolved.cells, dtype=pl.Int128, eager=True).scatter(at, values)

        def column(vector: str) -> str:
            index = plan.column_of(vector)
            return "rows" if index is None else f"units{index}"

        values = {name: laid_out(column(name)).alias(name) for name in plan.vectors}
        counted = {
            point.name: points.filter(pl.col("statistic") == i).select(
                pl.col(name).cast(pl.Int64) for name in ("cell", "point", "rows")
            )
            for i, point in enumerate(plan.histograms)
            if points is not None
        }
        return ExactAggregates(plan.resolved.key_grid, values, _summary(summary, plan), counted)

    def summarize(self, job: EngineJob) -> InputSummary:
        """The input summary alone: for a re-run that returns a stored release."""
        plan = job.plan
        with withholding_engine_errors(f"reading the input of release {plan.name!r}"):
            selected = _selected(read(job.data, self._session), plan)
            row = _one_row(selected, _summary_metrics(selected, plan))
        return _summary(row, plan)


__all__ = [
    "DEFAULT_MASTER",
    "MASTER_ENV",
    "REMOTE_ENV",
    "SparkEngine",
    "polars_schema",
    "read",
    "spark_session",
]
