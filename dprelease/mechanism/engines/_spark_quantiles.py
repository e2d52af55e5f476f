"""The Spark engine's part of a quantile statistic: each kept row's grid point, and the rows of
every observed (statistic, cell, grid point) in one aggregation.

The same rule as the polars engine (`QuantileGrid.discretize` after the nulls rule and clamp of
a sum, which the engine applies first): (x − lower)/resolution in float64, rounded half to even
(`rint`); an index 0 … B − 1.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from dprelease.mechanism._quantile_accounting import QuantileAllocation


def grid_point(number: Column, q: QuantileAllocation) -> Column:
    """The grid index of a value already filled by the nulls rule and clamped to the statistic's
    bounds (the engine's `_clamped`, as for a sum)."""
    stat = q.statistic
    steps = F.rint((number - F.lit(stat.lower)) / F.lit(float(q.grid.resolution)))
    points = steps.try_cast(T.LongType())
    return F.least(F.greatest(points, F.lit(0)), F.lit(q.grid.bins - 1))


def histograms(bounded: DataFrame, points: list[Column]) -> DataFrame:
    """Rows per observed (statistic index, cell, grid point): one shuffle for every quantile
    statistic, each kept row counted once per statistic."""
    pairs = F.array(
        *(F.struct(F.lit(i).alias("statistic"), p.alias("point")) for i, p in enumerate(points))
    )
    exploded = bounded.select("cell", F.explode(pairs).alias("pair"))
    return exploded.groupBy("cell", "pair.statistic", "pair.point").agg(
        F.count(F.lit(1)).alias("rows")
    )
