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
from typing import Any

import numpy as np
import polars as pl
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from dprelease.errors import DataError
from dprelease.mechanism.engines import _spark_selection
from dprelease.mechanism.engines._contract import (
    EngineJob,
    ExactAggregates,
    InputSummary,
    fingerprint,
)
from dprelease.mechanism.engines._inputs import withholding_engine_errors
from dprelease.mechanism.engines._plan import (
    DistinctUnits,
    RowPlan,
)
from dprelease.mechanism.engines._schema import validate_dataset, validate_schema
from dprelease.mechanism.engines._spark_rows import (
    _SUM,
    _as_key,
    _bounded,
    _column,
    _domain_frame,
    _grid_point,
    _histograms,
    _in_period,
    _key_types,
    _salt_frame,
    _selected,
    _signed,
    _units,
)
from dprelease.mechanism.engines._spark_session import (
    DEFAULT_MASTER,
    MASTER_ENV,
    REMOTE_ENV,
    polars_schema,
    read,
    spark_session,
)

#: The fingerprint's hash seed is fixed (not the per-release salt): fingerprints of the same rows
#: must agree across runs. Spark's xxhash64 is stable across versions.
FINGERPRINT_SEED = 0x6470_7265_6C65_6173
FINGERPRINT_SCHEME = "spark-xxhash64-v1"


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
        *(  # a value is typed as a double or null (`_number`): NaN is missing too
            rows_where(F.col(f"value{i}").isNull() | F.isnan(f"value{i}")).alias(f"missing{i}")
            for i in range(len(plan.reads))
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
        missing_rows={c: int(row[f"missing{i}"]) for i, c in enumerate(plan.reads)},
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
    masses = [
        _units(g.mass, plan).alias(f"mass{i}")
        for i, g in enumerate(plan.histograms)
        if g.mass is not None
    ]
    bounding_columns = ["unit", "order", "salt"] if bounding is not None else []
    df = df.select(cell.alias("cell"), *units, *points, *masses, *bounding_columns)
    if bounding is not None:
        df = _bounded(df, bounding)
    weighed = [
        (F.col(f"point{i}"), None if g.mass is None else F.col(f"mass{i}"))
        for i, g in enumerate(plan.histograms)
    ]
    hist = _histograms(df, weighed) if points else None
    sums = [F.sum(F.col(f"units{i}").cast(_SUM)).alias(f"units{i}") for i in range(len(units))]
    return df.groupBy("cell").agg(F.count(F.lit(1)).alias("rows"), *sums), hist


#: What a local-DP release (`dprelease.local`) shares with central ones on Spark, so both type
#: and group by the same keys: key typing, column quoting and the public domains as a frame.
as_key, column, key_types, domain_frame = _as_key, _column, _key_types, _domain_frame


class SparkEngine:
    """Apache Spark (classic or Spark Connect): for inputs beyond one machine."""

    name = "spark"

    def __init__(self, session: SparkSession | None = None) -> None:
        self._session = session  # default: `spark_session()` when an input path is read

    def check(self, job: EngineJob) -> None:
        """Validate the declared schema (each file's, in a local dataset directory) and let
        Spark analyse the whole plan; reads no rows."""
        plan = job.plan
        validate_dataset(job.data, plan)
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
