"""The Spark engine's translation of the row plan (`_plan.RowPlan`) into Spark columns: each
key's types, values as exact integer units, grid points, the public key domains as frames, the
salted bounding of each unit's contributions, the typed selection of the plan's columns and the
period filter. `spark.py` and `_spark_selection.py` run these over an input; this module only
says what each step is, so both read the same definitions.
"""

from __future__ import annotations

from datetime import date

import polars as pl
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.window import WindowSpec

from dprelease.errors import SchemaError
from dprelease.mechanism.engines._plan import (
    OLH_PRIME,
    OLH_REPORT,
    Bounding,
    GridPoint,
    InCategories,
    Number,
    Reported,
    RowPlan,
    Units,
)
from dprelease.period import Period

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
    """A number as `target` (BIGINT or DOUBLE), a boolean as 0/1; null where the column holds
    no numbers."""
    if isinstance(source, T.NumericType | T.BooleanType):
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
    """A value column as a number: null or NaN → the plan's fill (the nulls rule; without one,
    null: the row has no value), clamped."""
    value = F.col(f"value{number.read}")
    fill = F.lit(number.fill) if number.fill is not None else F.lit(None).cast(T.DoubleType())
    filled = F.when(value.isNull() | F.isnan(value), fill).otherwise(value)
    clamped = F.least(F.greatest(filled, F.lit(number.lower)), F.lit(number.upper))
    # greatest and least skip nulls: a row without a value stays null only if kept apart
    return clamped if number.fill is not None else F.when(filled.isNotNull(), clamped)


def _in_categories(term: InCategories, plan: RowPlan) -> Column:
    """1.0 where the column holds one of the categories (as numbers or as text), else 0.0."""
    column = F.col(f"category{plan.categories.index(term.column)}")
    typed = column.try_cast(T.DoubleType() if term.numeric else T.StringType())
    return F.when(typed.isin(list(term.categories)), F.lit(1.0)).otherwise(F.lit(0.0))


def _is(answer: object, report: Column) -> Column:
    """A k-RR report equals `answer`, compared as the polars engine compares it."""
    if isinstance(answer, bool):
        return F.lower(report.cast(T.StringType())) == F.lit("true" if answer else "false")
    if isinstance(answer, int):
        return report.try_cast(T.DoubleType()) == F.lit(float(answer))
    return report.cast(T.StringType()) == F.lit(answer)


def _olh_parts(report: Column) -> tuple[Column, Column, Column]:
    text = report.cast(T.StringType())
    return tuple(  # type: ignore[return-value]
        F.when(text.rlike(OLH_REPORT), F.regexp_extract(text, OLH_REPORT, i)).try_cast(T.LongType())
        for i in (1, 2, 3)
    )


def _supports(term: Reported, report: Column, answer: int) -> Column:
    """Whether a report supports answer number `answer` (`Reported`)."""
    randomizer = term.randomizer
    if randomizer.mechanism == "krr":
        return _is(randomizer.domain[answer], report)
    if randomizer.mechanism == "oue":
        return F.substring(report.cast(T.StringType()), answer + 1, 1) == F.lit("1")
    assert randomizer.g is not None
    a, b, y = _olh_parts(report)
    return ((a * answer + b) % OLH_PRIME) % randomizer.g == y


def _well_formed(term: Reported, report: Column) -> Column:
    randomizer = term.randomizer
    if randomizer.mechanism == "krr":
        found = [F.coalesce(_supports(term, report, j), F.lit(False)) for j in range(randomizer.k)]
        any_of = found[0]
        for one in found[1:]:
            any_of = any_of | one
        return any_of
    text = report.cast(T.StringType())
    if randomizer.mechanism == "oue":
        return text.rlike(f"^[01]{{{randomizer.k}}}$")
    assert randomizer.g is not None
    a, b, y = _olh_parts(report)
    return (
        text.rlike(OLH_REPORT)
        & a.between(1, OLH_PRIME - 1)
        & b.between(0, OLH_PRIME - 1)
        & y.between(0, randomizer.g - 1)
    )


def _reported(term: Reported, plan: RowPlan) -> Column:
    """1.0 where the row's report passes the term's test (`Reported`), else 0.0."""
    report = F.col(f"category{plan.categories.index(term.column)}")
    present = report.isNotNull()
    if term.test == "answered":
        passed = present
    elif term.test == "stale":
        sealed = F.col(f"category{plan.categories.index(term.hash_column)}")
        passed = present & F.coalesce(
            sealed.cast(T.StringType()) != F.lit(term.expected), F.lit(True)
        )
    elif term.test == "supports":
        formed = F.coalesce(_well_formed(term, report), F.lit(False))
        passed = present & formed & _supports(term, report, term.answer)
    else:
        passed = present & ~F.coalesce(_well_formed(term, report), F.lit(False))
    return F.when(F.coalesce(passed, F.lit(False)), F.lit(1.0)).otherwise(F.lit(0.0))


def _factor(factor: Number | InCategories | Reported, plan: RowPlan) -> Column:
    if isinstance(factor, Number):
        return _value(factor)
    if isinstance(factor, InCategories):
        return _in_categories(factor, plan)
    return _reported(factor, plan)


def _units(units: Units, plan: RowPlan) -> Column:
    """What a row adds to a sum in integer units, as the polars engine computes it: the product
    of its factors, rounded half to even (as polars' `round`), clamped to the range in units: a
    BIGINT (|units| ≤ 2^53), narrower than the DECIMAL(38,0) sums while rows are shuffled and
    sorted."""
    factors = [_factor(f, plan) for f in units.factors]
    product = factors[0] if len(factors) == 1 else factors[0] * factors[1]
    product = F.coalesce(product, F.lit(0.0))  # a dropped factor without a value: adds 0
    rounded = F.rint(product / F.lit(units.granularity)).try_cast(T.LongType())
    return F.least(F.greatest(rounded, F.lit(units.lower_units)), F.lit(units.upper_units))


def _grid_point(point: GridPoint) -> Column:
    """The grid index of a value, as the polars engine computes it: (x − lower)/resolution in
    float64, rounded half to even (`rint`), clamped to 0 … B − 1; null where a dropped number
    has no value (greatest and least skip nulls, so it is kept apart)."""
    steps = F.rint((_value(point.number) - F.lit(point.lower)) / F.lit(point.resolution))
    index = F.least(F.greatest(steps.try_cast(T.LongType()), F.lit(0)), F.lit(point.bins - 1))
    return index if point.number.fill is not None else F.when(steps.isNotNull(), index)


def _histograms(bounded: DataFrame, points: list[tuple[Column, Column | None]]) -> DataFrame:
    """Rows per observed (histogram index, cell, grid point), or a weighted histogram's sum of
    weight units there (each point with its mass: None counts the row once): one shuffle for
    every histogram, each kept row in each histogram once."""
    pairs = F.array(
        *(
            F.struct(
                F.lit(i).alias("statistic"),
                point.alias("point"),
                (F.lit(1).cast(T.LongType()) if mass is None else mass).alias("mass"),
            )
            for i, (point, mass) in enumerate(points)
        )
    )
    exploded = bounded.select("cell", F.explode(pairs).alias("pair"))
    exploded = exploded.where(F.col("pair.point").isNotNull())  # a dropped row has no point
    return exploded.groupBy("cell", "pair.statistic", "pair.point").agg(
        F.sum("pair.mass").alias("rows")
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
