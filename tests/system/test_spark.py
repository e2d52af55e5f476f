"""The Spark engine as a user meets it: selection, inputs, schema, withheld errors, Connect."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest
from helpers import BASE_SPEC, exact_table, prepare_release
from polars.testing import assert_frame_equal
from sparktest import local_session
from typer.testing import CliRunner

from dprelease.cli import app
from dprelease.errors import DataError, SchemaError, SpecError
from dprelease.mechanism.engines import EngineJob, new_salt
from dprelease.mechanism.engines import spark as spark_engine
from dprelease.publish import RELEASE_FILES
from dprelease.spec import parse_spec

pytestmark = pytest.mark.spark
#: The shared BASE_SPEC with a mean of the cost, which reuses its count and sum.
SPEC = {
    **BASE_SPEC,
    "statistics": [
        *BASE_SPEC["statistics"],
        {"name": "avg", "kind": "mean", "column": "cost", "lower": 0, "upper": 100},
    ],
}
ROWS = pl.DataFrame(
    {
        "pid": [1, 2, 2, 3, 4, 5],
        "region": ["n", "s", "s", "s", "x", None],
        "cost": [10.0, 250.0, None, -5.0, 1.0, 1.0],
    }
)
EXPECTED = [("n", 1), ("s", 3), ("e", 0)]  # counts: region x and null dropped, pid 2 twice


@pytest.fixture(scope="module")
def spark():
    return local_session()


@pytest.fixture
def parquet(tmp_path: Path) -> Path:
    path = tmp_path / "rows.parquet"
    ROWS.write_parquet(path)
    return path


def exact(data, engine: str | None = "spark") -> pl.DataFrame:
    """The released table without noise."""
    return exact_table(data, parse_spec(SPEC), engine=engine)


def test_spark_release_equals_the_polars_release_and_says_so(parquet: Path, spark) -> None:
    """Same table through noise and post-processing (Int128 sums included); the manifest names
    the engine, and the spec hash does not depend on it."""
    on_spark = prepare_release(parquet, parse_spec({**SPEC, "engine": "spark"})).draw()
    on_polars = prepare_release(parquet, parse_spec(SPEC)).draw()
    assert (on_spark.manifest.engine, on_polars.manifest.engine) == ("spark", "polars")
    assert on_spark.manifest.spec_hash == on_polars.manifest.spec_hash
    assert_frame_equal(exact(parquet, "spark"), exact(parquet, "polars"))
    assert exact(parquet).select("region", "n").rows() == EXPECTED


def test_the_argument_overrides_the_spec_and_unknown_engines_are_refused(parquet: Path) -> None:
    resolved = parse_spec({**SPEC, "engine": "spark"})
    assert prepare_release(parquet, resolved, engine="polars").engine == "polars"
    with pytest.raises(SpecError, match=r"^engine: unknown engine 'duckdb'"):
        prepare_release(parquet, resolved, engine="duckdb")


def test_inputs_table_folder_and_dataframe_give_the_same_aggregates(tmp_path, spark) -> None:
    folder = tmp_path / "rows"
    folder.mkdir()
    ROWS.head(3).write_parquet(folder / "part-0.parquet")
    ROWS.tail(3).write_parquet(folder / "part-1.parquet")
    frame = spark.read.parquet(str(folder))
    frame.createOrReplaceTempView("confidential_rows")
    for data in (folder, "confidential_rows", frame):
        assert exact(data).select("region", "n").rows() == EXPECTED


def test_unsupported_inputs_are_refused_before_anything_runs(tmp_path, spark) -> None:
    resolved = parse_spec(SPEC)
    with pytest.raises(FileNotFoundError):
        prepare_release(tmp_path / "missing.parquet", resolved, engine="spark")
    (tmp_path / "rows.csv").write_text("pid,region,cost\n1,n,2\n")
    with pytest.raises(SchemaError, match="use parquet"):
        prepare_release(tmp_path / "rows.csv", resolved, engine="spark")
    with pytest.raises(SchemaError, match="not polars"):
        prepare_release(ROWS, resolved, engine="spark")


def test_declared_types_are_judged_as_the_polars_engine_judges_them(tmp_path, spark) -> None:
    path = tmp_path / "types.parquet"
    pl.DataFrame(
        {
            "u64": pl.Series([2**64 - 1], dtype=pl.UInt64),
            "u8": pl.Series([1], dtype=pl.UInt8),
            "money": [Decimal("1.50")],
            "naive": [datetime(2024, 1, 1)],
            "utc": pl.Series([datetime(2024, 1, 1)]).dt.replace_time_zone("UTC"),
            "names": [["a"]],
        }
    ).write_parquet(path)
    schema = spark_engine.polars_schema(spark.read.parquet(str(path)).schema)
    assert schema["u64"] == pl.Decimal(20, 0) and schema["u8"].is_integer()
    assert schema["money"] == pl.Decimal(38, 2)
    assert schema["naive"] == pl.Datetime("us") and schema["utc"] == pl.Datetime("us", "UTC")
    assert schema["names"] == pl.Object
    for changed, error in [
        (
            pl.col("cost").cast(pl.String),
            r"^release\.statistics\[1\]\.column: column 'cost'.*numeric",
        ),
        (pl.lit(1).alias("region"), r"^release\.group_by\[0\]\.column: column 'region'.*domain"),
        (pl.concat_list("pid").alias("pid"), r"^release\.privacy_unit: column 'pid'.*plain column"),
    ]:
        ROWS.with_columns(changed).write_parquet(path)
        for engine in ("polars", "spark"):
            with pytest.raises(SchemaError, match=error):
                prepare_release(path, parse_spec(SPEC), engine=engine)


def test_spark_errors_never_quote_confidential_values(spark) -> None:
    """A row that makes Spark fail with its value in the message: the error names the step."""
    from pyspark.sql import functions as F

    frame = spark.createDataFrame(ROWS.to_arrow()).withColumn(
        "cost",
        F.when(F.col("pid") == 3, F.raise_error(F.concat(F.lit("SECRET-"), F.col("region"))))
        .otherwise(F.col("cost")),
    )  # fmt: skip
    with pytest.raises(DataError) as info:
        exact(frame)
    assert "SECRET" not in str(info.value) and "aggregating the input" in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_cli_release_with_engine_spark(parquet: Path, tmp_path: Path, spark) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps({"release": SPEC}))  # JSON is YAML
    out = tmp_path / "out"
    args = ["release", "--spec", str(spec), "--data", str(parquet), "--out", str(out)]
    args += ["--epsilon", "1", "--cap", "2", "--ledger", str(tmp_path / "l.sqlite")]
    result = CliRunner().invoke(app, [*args, "--engine", "spark", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["engine"] == "spark"
    assert {p.name for p in out.iterdir()} == set(RELEASE_FILES)
    refused = CliRunner().invoke(app, [*args, "--engine", "nope"])
    assert refused.exit_code == 2 and "unknown engine 'nope'" in refused.stderr


@pytest.fixture
def connect_server(spark) -> Iterator[str]:
    """A Spark Connect server on a free loopback port, as a user's `sc://host:port` names one:
    started on the JVM the Spark tests share (a second JVM of `remote("local")` took a fifth of
    the Spark tier's test time), stopped after the test."""
    context = spark.sparkContext._jsc.sc()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    context.conf().set("spark.connect.grpc.binding.address", "127.0.0.1")
    context.conf().set("spark.connect.grpc.binding.port", str(port))
    service = spark._jvm.org.apache.spark.sql.connect.service.SparkConnectService
    service.start(context)
    try:
        yield f"sc://127.0.0.1:{port}"
    finally:
        service.stop(getattr(service, "stop$default$1")(), getattr(service, "stop$default$2")())


def test_spark_connect_from_the_environment(parquet: Path, connect_server: str) -> None:
    """$DPRELEASE_SPARK_REMOTE names a Spark Connect server, and the engine runs unchanged on
    it. A fresh process: one Python process holds one kind of session."""
    script = (
        "import sys; from fractions import Fraction; "
        "from dprelease.mechanism.noise import NoiseSource; "
        "from dprelease.publish import decide_budget, prepare; "
        "from dprelease.spec import parse_spec; "
        "from dprelease.mechanism.engines.spark import spark_session; "
        f"resolved = parse_spec({SPEC!r}); "
        "budget = decide_budget(resolved, epsilon=Fraction(1)); "
        "t = prepare(sys.argv[1], resolved, budget, engine='spark')"
        ".draw(NoiseSource.zero_for_tests(), allow_unsafe_noise=True).table; "
        "print(type(spark_session()).__module__, t.select('region', 'n').rows())"
    )
    env = {**os.environ, spark_engine.REMOTE_ENV: connect_server}
    done = subprocess.run(
        [sys.executable, "-c", script, str(parquet)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    module, rows = done.stdout.strip().splitlines()[-1].split(" ", 1)
    assert module == "pyspark.sql.connect.session" and rows == str(EXPECTED)


def test_salts_never_appear_in_query_plans(parquet: Path, spark, capsys) -> None:
    """Spark shows plans in its UI and event logs: the secret salt must not be a literal there,
    in the aggregation nor in a quantile's histograms."""
    median = {"name": "m", "kind": "median", "column": "cost", "lower": 0, "upper": 100,
              "resolution": 1}  # fmt: skip
    resolved = parse_spec({**SPEC, "statistics": [*SPEC["statistics"], median]})
    allocation = prepare_release(parquet, resolved).allocation
    salt = new_salt()
    plan = EngineJob(parquet, resolved, allocation, None).plan  # the row plan the engine runs
    selected = spark_engine._selected(spark.read.parquet(str(parquet)), plan)
    cells, histograms = spark_engine._cells(selected, plan, salt)
    assert histograms is not None
    for frame in (cells, histograms):
        frame.explain("extended")
    plans = capsys.readouterr().out
    assert "xxhash64" in plans
    assert str(salt) not in plans and str(spark_engine._signed(salt)) not in plans


def test_the_input_summary_is_the_same_observed_or_counted_in_a_job_of_its_own(
    parquet: Path, tmp_path: Path, spark, monkeypatch
) -> None:
    """From Spark 4.3 the summary is observed in the aggregation's pass; before, and when no
    row reaches the aggregation (adaptive execution then drops the observing stage), it is a
    job of its own. Every way gives the facts `summarize` gives."""
    from dataclasses import asdict

    resolved = parse_spec(SPEC)
    allocation = prepare_release(parquet, resolved).allocation
    engine = spark_engine.SparkEngine(spark)
    nothing_kept = tmp_path / "outside.parquet"  # every region outside the domain
    ROWS.with_columns(pl.lit("x").alias("region")).write_parquet(nothing_kept)

    def summaries(path: Path) -> list[dict]:
        job = EngineJob(path, resolved, allocation, None)
        aggregated = engine.aggregate(job, new_salt())
        alone = engine.summarize(job)
        return [asdict(aggregated.summary), asdict(alone)]

    assert spark_engine._observes_exactly(spark)  # the Spark the tests run on observes
    observed = summaries(parquet) + summaries(nothing_kept)
    monkeypatch.setattr(spark_engine, "_observes_exactly", lambda session: False)
    counted = summaries(parquet) + summaries(nothing_kept)
    assert observed == counted
    assert observed[0] == observed[1] and observed[2] == observed[3]
    assert observed[0]["rows"] == observed[2]["rows"] == ROWS.height
    assert observed[2]["keyed_rows"] == {"region": ROWS.height}
