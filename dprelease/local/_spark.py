"""The Spark engine of a release of randomized answers: the same counts as `_counts` (polars),
computed where the reports are (parquet, a table, a Spark DataFrame).

Keys are typed and joined to the public domains exactly as the central Spark engine does
(`_adapter.spark_engine`), so a row lands in the same cell on both engines; the reports are then
counted per cell in one aggregation.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from dprelease.local._adapter import (
    DataSource,
    Declared,
    key_plan,
    spark_engine,
    spark_input,
    validate_schema,
    withholding_engine_errors,
)
from dprelease.local._counts import (
    CellCounts,
    ReportColumns,
    another_configuration,
    check_hash_column,
    check_question,
    domain_dtype,
    malformed,
)
from dprelease.mechanism.randomized import PRIME, Randomizer
from dprelease.spec import ResolvedSpec

_OLH = r"^(\d{1,10}):(\d{1,10}):(\d{1,10})$"


def _answer_type(randomizer: Randomizer) -> T.DataType:
    dtype = domain_dtype(randomizer)
    if dtype == pl.Boolean:
        return T.BooleanType()
    return T.LongType() if dtype.is_integer() else T.StringType()


def _supports(report: Column, randomizer: Randomizer) -> tuple[Column, list[Column]]:
    """Whether a report is malformed, and per answer j whether it supports j (OUE, OLH)."""
    k = randomizer.k
    if randomizer.mechanism == "oue":
        bad = ~report.rlike(f"^[01]{{{k}}}$")
        return bad, [F.substring(report, j + 1, 1) == F.lit("1") for j in range(k)]
    assert randomizer.g is not None
    a, b, y = (F.regexp_extract(report, _OLH, i).try_cast(T.LongType()) for i in (1, 2, 3))
    bad = ~(
        report.rlike(_OLH)
        & a.between(1, PRIME - 1)
        & b.between(0, PRIME - 1)
        & y.between(0, randomizer.g - 1)
    )
    bad = F.coalesce(bad, F.lit(True))
    return bad, [((a * j + b) % PRIME) % randomizer.g == y for j in range(k)]


def spark_counts(
    data: DataSource, structure: ResolvedSpec, columns: ReportColumns, randomizer: Randomizer
) -> CellCounts:
    """Respondents and support counts per cell, on Spark."""
    column = columns.question
    engine = spark_engine()
    cells, k = max(structure.key_grid.height, 1), randomizer.k
    with withholding_engine_errors("counting the randomized reports on Spark"):
        frame, schema = spark_input(data)
        plan = key_plan(structure)
        validate_schema(schema, plan, Declared())
        check_question(schema, column, randomizer, untyped=False)
        check_hash_column(schema, columns.hash_column, untyped=False)
        types = frame.schema
        keys = structure.spec.key_columns
        names = {c: f"key{i}" for i, c in enumerate(keys)}
        df = frame.select(
            *(
                engine.as_key(
                    engine.column(c), types[c].dataType, engine.key_types(plan, c)[1]
                ).alias(names[c])
                for c in keys
            ),
            engine.column(column).alias("report"),
            engine.column(columns.hash_column).cast(T.StringType()).alias("hash"),
        ).filter(F.col("report").isNotNull())
        stale = (F.col("hash").isNull() | (F.col("hash") != F.lit(columns.expected))).cast(
            T.LongType()
        )
        session = frame.sparkSession
        cell, stride = F.lit(0).cast(T.LongType()), 1
        for group, domain in reversed(list(zip(structure.spec.group_by, structure.domains,
                                               strict=True))):  # fmt: skip
            group_names = [names[c] for c in group.key_columns]
            group_types = [engine.key_types(plan, c) for c in group.key_columns]
            public = F.broadcast(engine.domain_frame(session, domain, group_names, group_types))
            df = df.join(public, on=group_names, how="inner")
            df = df.withColumn("cell", cell + F.col("index") * stride).drop("index", *group_names)
            cell, stride = F.col("cell"), stride * domain.height
        df = df.withColumn("cell", cell)
        if randomizer.mechanism == "krr":
            target = _answer_type(randomizer)
            answers = pl.DataFrame(
                {"answer": list(randomizer.domain), "index": range(k)},
                schema={"answer": domain_dtype(randomizer), "index": pl.Int64},
            )
            public_answers = session.createDataFrame(
                answers.to_arrow(compat_level=pl.CompatLevel.oldest())
            ).select(F.col("answer").cast(target).alias("answer"), "index")
            typed = engine.as_key(F.col("report"), types[column].dataType, target)
            pairs = (
                df.select("cell", typed.alias("answer"), stale.alias("stale"))
                .join(F.broadcast(public_answers), on="answer", how="left")
                .groupBy("cell", "index")
                .agg(F.count(F.lit(1)).alias("count"), F.sum("stale").alias("stale"))
            )
            observed = pl.DataFrame(pl.from_arrow(pairs.toArrow()))
        else:
            bad, supports = _supports(F.col("report"), randomizer)
            per_cell = df.groupBy("cell").agg(
                F.count(F.lit(1)).alias("n"),
                F.sum(stale).alias("stale"),
                F.sum(bad.cast(T.LongType())).alias("malformed"),
                *(F.sum(s.cast(T.LongType())).alias(f"s{j}") for j, s in enumerate(supports)),
            )
            observed = pl.DataFrame(pl.from_arrow(per_cell.toArrow()))
    if observed.height and int(observed["stale"].sum()):
        raise another_configuration(columns, int(observed["stale"].sum()))
    if randomizer.mechanism == "krr":
        missing = observed.filter(pl.col("index").is_null())
        if missing.height:
            raise malformed(column, randomizer, int(missing["count"].sum()))
        support = np.zeros((cells, k), dtype=np.int64)
        np.add.at(
            support,
            (observed["cell"].to_numpy().astype(np.int64), observed["index"].to_numpy()),
            observed["count"].to_numpy(),
        )
        return CellCounts(support.sum(axis=1), support)
    if observed.height and int(observed["malformed"].sum()):
        raise malformed(column, randomizer, int(observed["malformed"].sum()))
    respondents = np.zeros(cells, dtype=np.int64)
    support = np.zeros((cells, k), dtype=np.int64)
    rows = observed["cell"].to_numpy().astype(np.int64)
    respondents[rows] = observed["n"].to_numpy()
    support[rows] = observed.select(f"s{j}" for j in range(k)).to_numpy()
    return CellCounts(respondents, support)
