"""Key selection's aggregate on Spark (`DistinctUnits`): the polars engine's semantics
(`selection.units_per_key`), run where the data live, with only the counts per (key, g) coming
back to the driver.

From the typed rows (`_spark_rows._selected`): the rows with a unit (without a unit column each
row is its own) in the period and in the public domains of the other group-by entries; the distinct
(unit, key) pairs of the selected column(s), nulls and the `always` keys dropped; per unit the G
pairs of smallest salted xxhash64 of (unit, key), ties by key value; per (key, g) the units that
kept g keys. Which G keys a unit keeps depends on its own keys only; the hash differs from
polars', as the statistics' bounding does (PRIVACY.md: the engines choose by different hash
functions).
"""

from __future__ import annotations

import numpy as np
import polars as pl
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from dprelease.mechanism.engines import _spark_rows as rows
from dprelease.mechanism.engines._plan import DistinctUnits, RowPlan
from dprelease.mechanism.selection import UNITS, units_table


def distinct_units(
    selected: DataFrame, plan: RowPlan, term: DistinctUnits, salt: int
) -> tuple[pl.DataFrame, np.ndarray]:
    """The candidate keys (sorted, under the spec's column names) and units[k, g − 1]."""
    session = selected.sparkSession
    keys = {column: f"key{i}" for i, column in enumerate(plan.key_columns)}
    names = [keys[column] for column in term.columns]
    df = (
        selected
        if plan.unit is not None
        else selected.withColumn("unit", F.monotonically_increasing_id())
    )
    df = df.filter(F.col("unit").isNotNull() & rows._in_period(df, plan.period))
    for index, (group, domain) in enumerate(
        zip(plan.resolved.spec.group_by, plan.resolved.domains, strict=True)
    ):
        if index == term.group:
            continue
        others = [keys[column] for column in group.key_columns]
        types = [rows._key_types(plan, column) for column in group.key_columns]
        frame = rows._domain_frame(session, domain, others, types).drop("index")
        df = df.join(F.broadcast(frame), on=others, how="left_semi")
    pairs = df.select("unit", *names).dropna().distinct()
    always = plan.resolved.domains[term.group]
    if always.height:
        types = [rows._key_types(plan, column) for column in term.columns]
        frame = rows._domain_frame(session, always, names, types).drop("index")
        pairs = pairs.join(F.broadcast(frame), on=names, how="left_anti")
    pairs = pairs.crossJoin(F.broadcast(rows._salt_frame(session, salt)))
    order = Window.partitionBy("unit").orderBy(F.xxhash64("salt", "unit", *names), *names)
    kept = pairs.withColumn("rank", F.row_number().over(order))
    kept = kept.filter(F.col("rank") <= term.max_keys_per_unit)
    kept = kept.withColumn("held", F.count(F.lit(1)).over(Window.partitionBy("unit")))
    counts = kept.groupBy(*names, "held").agg(F.count(F.lit(1)).alias(UNITS))
    table = pl.DataFrame(pl.from_arrow(counts.toArrow()))
    candidates, units = units_table(table, names, term.max_keys_per_unit, held="held")
    return candidates.rename(dict(zip(names, term.columns, strict=True))), units
