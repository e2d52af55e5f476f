"""The Spark engine's session and input: where releases run, and how an input is opened and
its schema read in the types the shared schema check speaks (polars')."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import polars as pl
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from dprelease.errors import ConfigError, SchemaError
from dprelease.mechanism.engines._inputs import DataSource, refuse_irregular

#: Spark Connect URL (sc://host:15002): releases run on that Spark Connect server.
REMOTE_ENV = "DPRELEASE_SPARK_REMOTE"
#: Spark master (spark://host:7077, yarn, k8s://…, local[4]) for a classic session.
MASTER_ENV = "DPRELEASE_SPARK_MASTER"
DEFAULT_MASTER = "local[2]"


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
    """Open the input lazily. A string or path is parquet when it is a URI, exists locally (read
    by its absolute path: the JVM may have started in another directory) or ends in
    .parquet/.pq; otherwise it names a table (e.g. `db.visits`)."""
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
    if "://" in text:
        return spark.read.parquet(text)
    if local.exists():  # the JVM resolves a relative path in its own working directory
        return spark.read.parquet(str(local.resolve()))
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
