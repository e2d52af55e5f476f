"""The Spark engine against Tumult Analytics on the same Spark, a plain-Spark floor, and the
polars engine.

The query of bench_engine.py on its synthetic parquet: count, sum(income, 0, 200000) and
sum(visits, 0, 20) by region × age_band (500 public cells), at most 4 random rows per person,
ε = 1. Variants, each a fresh process (repeats interleaved), both Spark ones on the same
PySpark, local[2], 4 GB of driver memory:

* spark: dprelease `dp.release(path, spec, epsilon=1, engine="spark")` (no ledger): schema, plan,
  the Spark aggregation with the input summary, noise for the full grid, manifest;
* tumult: Tumult Analytics `Session.from_dataframe` over `spark.read.parquet(path)` with
  `AddRowsWithID("person_id")`, then three queries (Tumult answers one aggregation per query),
  each `replace_null_and_nan` (income: null counts as 0, as in dprelease) →
  `enforce(MaxRowsPerID(4))` → `groupby(KeySet)` → count or sum, ε/3 each, collected;
* floor: the same query written directly in PySpark, no DP (a domain filter, a `row_number` over
  each person's rows ordered by a salted row hash, ≤ 4 rows, nulls as 0 and clamps, group-by
  count and sums, collected): what any Spark job of this query costs, so the ratio of Tumult's
  time to the floor's is the most any Spark engine can be faster than Tumult here;
* polars: the same `dp.release` with the polars engine.

Time is measured inside the process once the SparkSession is up (JVM start and imports excluded;
the first query of a fresh JVM, as in a release job). Median and range of `--repeats` runs, with
the load average at the start of each (the machine may be shared); ratios are of medians. Peak
memory is not reported: the JVM is not the measured process (bench_engine.py measures the polars
engine's).

    python3 dev.py test                 # once: .venv with the [spark] extra
    bash bench/setup_tumult.sh          # once: .venv-tumult (Python 3.12) with Tumult Analytics
    .venv/bin/python bench/bench_spark.py --rows 1000000
    .venv/bin/python bench/bench_spark.py --rows 10000000   # minutes per Tumult run

Generates the data (bench_engine.generate, seeded synthetic rows) in a temporary folder, prints a
markdown table and writes it to bench/results/spark.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_engine import (
    AGE_BANDS,
    EPSILON,
    INCOME,
    MAX_ROWS,
    REGIONS,
    VISITS,
    bench_spec,
    generate,
)

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "spark.md"
PYTHON = HERE.parent / ".venv" / "bin" / "python"
TUMULT_PYTHON = HERE.parent / ".venv-tumult" / "bin" / "python"
SPARK_CONF = {
    "spark.master": "local[2]",
    "spark.driver.memory": "4g",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}


def _session():
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("bench_spark")
    for key, value in SPARK_CONF.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def run_spark(path: str) -> tuple[float, dict]:
    session = _session()  # the engine's spark_session() finds it (getOrCreate)
    seconds, facts = _release(path, "spark")
    return seconds, {**facts, "spark": session.version}


def _release(path: str, engine: str) -> tuple[float, dict]:
    """`dp.release` without a ledger: everything a release computes, nothing recorded."""
    import dprelease as dp
    from dprelease.spec import ReleaseSpec

    spec = ReleaseSpec.model_validate(bench_spec())
    start = time.perf_counter()
    result = dp.release(path, spec, epsilon=EPSILON, engine=engine)
    seconds = time.perf_counter() - start
    return seconds, {"cells": result.table.height, "total": int(result.table["n"].sum())}


def run_tumult(path: str) -> tuple[float, dict]:
    from importlib.metadata import version

    from tmlt.analytics import (
        AddRowsWithID,
        KeySet,
        MaxRowsPerID,
        PureDPBudget,
        QueryBuilder,
        Session,
    )

    session = _session()
    start = time.perf_counter()
    tumult = Session.from_dataframe(
        privacy_budget=PureDPBudget(EPSILON),
        source_id="rows",
        dataframe=session.read.parquet(path),
        protected_change=AddRowsWithID("person_id"),
    )
    keys = KeySet.from_dict({"region": REGIONS, "age_band": AGE_BANDS})

    def grouped():
        return (
            QueryBuilder("rows")
            .replace_null_and_nan({"income": 0.0})
            .enforce(MaxRowsPerID(MAX_ROWS))
            .groupby(keys)
        )

    queries = [
        grouped().count(name="n"),
        grouped().sum("income", *INCOME, name="income"),
        grouped().sum("visits", *VISITS, name="visits"),
    ]
    answers = [tumult.evaluate(q, PureDPBudget(EPSILON / len(queries))).collect() for q in queries]
    seconds = time.perf_counter() - start
    return seconds, {
        "cells": len(answers[0]),
        "total": sum(row["n"] for row in answers[0]),
        "spark": session.version,
        "tumult": version("tmlt.analytics"),
    }


def run_floor(path: str) -> tuple[float, dict]:
    """The query in plain PySpark, no DP and no input summary: the floor under the engine."""
    from pyspark.sql import Column, Window
    from pyspark.sql import functions as F

    def clamped(column: str, bounds: tuple[int, int]) -> Column:
        value = F.coalesce(F.col(column).cast("double"), F.lit(0.0))
        return F.least(F.greatest(value, F.lit(float(bounds[0]))), F.lit(float(bounds[1])))

    session = _session()
    start = time.perf_counter()
    rows = session.read.parquet(path)
    rows = rows.filter(F.col("region").isin(REGIONS) & F.col("age_band").isin(AGE_BANDS))
    order = F.xxhash64(F.lit(20240501), *rows.columns)  # a fixed salt: the floor is not DP
    rank = F.row_number().over(Window.partitionBy("person_id").orderBy(order))
    kept = rows.withColumn("rank", rank).filter(F.col("rank") <= MAX_ROWS)
    out = (
        kept.groupBy("region", "age_band")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.sum(clamped("income", INCOME)).alias("income"),
            F.sum(clamped("visits", VISITS)).alias("visits"),
        )
        .collect()
    )
    seconds = time.perf_counter() - start
    return seconds, {"cells": len(out), "total": sum(row["n"] for row in out)}


def run_polars(path: str) -> tuple[float, dict]:
    return _release(path, "polars")


VARIANTS = {"spark": run_spark, "tumult": run_tumult, "floor": run_floor, "polars": run_polars}
LABELS = {
    "spark": "dprelease, Spark engine",
    "tumult": "Tumult Analytics",
    "floor": "plain Spark, no DP (the floor)",
    "polars": "dprelease, polars engine",
}


def child(variant: str, path: str) -> None:
    seconds, facts = VARIANTS[variant](path)
    print(json.dumps({"seconds": seconds, **facts}))


def measure(python: Path, variant: str, path: Path, log: Path) -> dict:
    """One fresh process; its own timing (or the tail of its stderr if it failed) and the load
    average when it started, since other processes may share the machine."""
    env = {**os.environ, "PYSPARK_PYTHON": str(python)}  # Spark's Python workers: same venv
    load = os.getloadavg()[0]
    with log.open("w") as err:
        done = subprocess.run(
            [str(python), __file__, "--child", variant, "--path", str(path)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
        )
    if done.returncode != 0:
        return {"error": " / ".join(log.read_text().strip().splitlines()[-3:])}
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "load": load}


def summary(runs: list[dict]) -> dict:
    """Median and range of the runs' times, and each run's load; the first failure if any."""
    failed = [r for r in runs if "error" in r]
    if failed:
        return failed[0]
    times = [r["seconds"] for r in runs]
    return {**runs[0], "seconds": statistics.median(times), "times": times,
            "loads": [r["load"] for r in runs]}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10**6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.path)
        return 0
    plan = [("spark", PYTHON), ("floor", PYTHON), ("polars", PYTHON)]
    notes = []
    if TUMULT_PYTHON.exists():
        plan.insert(1, ("tumult", TUMULT_PYTHON))
    else:
        notes.append(f"Tumult skipped: {TUMULT_PYTHON} missing (run bash bench/setup_tumult.sh).")
    with tempfile.TemporaryDirectory(prefix="bench_spark_") as tmp:
        path = Path(tmp) / f"synthetic_{args.rows}.parquet"
        generate(args.rows, path)
        runs: dict[str, list[dict]] = {variant: [] for variant, _ in plan}
        for _ in range(args.repeats):  # interleaved, so every variant meets the same load
            for variant, python in plan:
                runs[variant].append(measure(python, variant, path, Path(tmp) / "err"))
                print(f"  {LABELS[variant]}: {_brief(runs[variant][-1])}", file=sys.stderr)
        results = {variant: summary(variant_runs) for variant, variant_runs in runs.items()}
    table = _report(args, results, notes)
    print(table)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(table)
    return 0


def _brief(result: dict) -> str:
    if "error" in result:
        return f"FAILED: {result['error']}"
    return f"{result['seconds']:.2f} s (load {result['load']:.1f}); total {result['total']:,}"


def _report(args: argparse.Namespace, results: dict, notes: list) -> str:
    spark = results.get("spark", {})
    floor = results.get("floor", {})
    versions = ", ".join(
        f"{name} {r[name]}" for name, r in (("spark", spark), ("tumult", results.get("tumult", {})))
        if name in r
    )  # fmt: skip
    lines = [
        "# Spark engine vs Tumult Analytics (same Spark) vs the polars engine",
        "",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()} (Tumult: its own venv, Python 3.12), {versions}; "
        f"Spark {SPARK_CONF['spark.master']}, driver memory {SPARK_CONF['spark.driver.memory']}. "
        "Query: count, sum(income, 0, 200000), sum(visits, 0, 20) by region × age_band (500 "
        "public cells), "
        f"≤ {MAX_ROWS} random rows per person, ε = {EPSILON:g}. Time: median (range) of "
        f"{args.repeats} fresh processes per variant, interleaved, measured once the SparkSession "
        "is up; ratios of medians.",
        "",
        "| rows | variant | time (s) | range (s) | time / Spark engine | time / floor | load "
        "averages at the starts | kept rows (noisy) |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for variant, r in results.items():
        if "error" in r:
            lines.append(
                f"| {args.rows:.0e} | {LABELS[variant]} | — | — | — | — | — | failed: "
                f"{r['error']} |"
            )
            continue
        ratio = f"{r['seconds'] / spark['seconds']:.2f}×" if "seconds" in spark else "—"
        to_floor = f"{r['seconds'] / floor['seconds']:.2f}×" if "seconds" in floor else "—"
        spread = f"{min(r['times']):.2f}–{max(r['times']):.2f}"
        loads = ", ".join(f"{load:.1f}" for load in r["loads"])
        lines.append(
            f"| {args.rows:.0e} | {LABELS[variant]} | {r['seconds']:.2f} | {spread} | {ratio} | "
            f"{to_floor} | {loads} | {r['total']:,} |"
        )
    return "\n".join(lines + [""] + notes) + "\n"


if __name__ == "__main__":
    sys.exit(main())
