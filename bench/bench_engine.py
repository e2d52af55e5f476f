"""End-to-end release cost: dprelease against plain polars floors and OpenDP's polars API.

One query on one synthetic parquet file per size: count, sum(income, 0, 200000) and
sum(visits, 0, 20) by region × age_band (50 × 10 public keys), at most 4 rows per person
(kept at random), ε = 1. Variants:

* floor: plain polars, lazy scan → a random row rank per person (`int_range().shuffle()
  .over(person_id)`) ≤ 4 → clamp → group-by, `collect(engine="streaming")`; no noise, no key
  grid, every row in memory;
* floor_sorted: the same keeping each person's first 4 rows after a sort by person
  (`sort(person_id).group_by(person_id).head(4)`), and floor_first: each person's first 4 rows
  in file order (`int_range().over(person_id) < 4`). Neither is random, so neither is the same
  query (the release keeps a random choice of rows); they are the cheapest plain truncations;
* dprelease: `prepare` and `draw` at ε = 1, as `dp.release` runs them, with the production
  (OS CSPRNG) noise source, i.e. validation, planning, the aggregation (partitioned by person
  above 2·10^6 rows, see dprelease/mechanism/engines/polars.py), noise for the full grid and
  the manifest;
* engine: the polars engine's `aggregate` alone (exact aggregates and the input summary, no
  planning, key grid or noise), partitioned as in a release or every `--rows-per-partition`
  rows; engine_whole: the same never partitioned, all rows in memory (what partitioning costs
  in time and saves in memory); summary: the input summary's own scan (`summarize`), what a
  re-run of a released slot reads (an `aggregate` makes the summary in its own pass);
* OpenDP: `Context.compositor` over `pl.scan_parquet`, identifier `person_id`,
  `truncate_per_group(4)`, public keys, `dp.len` and `dp.sum`, run in `.venv-bench` (OpenDP
  pins its own polars) — timed end to end and for the final `collect` alone — and the floor
  under OpenDP's polars version, so the polars version itself can be told apart.

Every measurement is a fresh child process: time is measured inside it (imports excluded),
peak memory is the child's RSS high-water mark (VmHWM), and its growth per input row beyond the
RSS after the imports. The variants take turns, `--repeats` rounds; the report gives medians
and ranges, ratios taken within each round against each floor, and the load average, since a
loaded machine slows every variant.

    bash bench/setup.sh                                   # once: .venv-bench with OpenDP
    .venv/bin/python bench/bench_engine.py                # 1M and 10M rows, ~5 minutes
    .venv/bin/python bench/bench_engine.py --sizes 1000000 --variants floor_sorted dprelease
    # docs/performance.md's table: 10^7 and 10^8 rows (1.7 GB of data on disk; --data keeps them)
    .venv/bin/python bench/bench_engine.py --sizes 10000000 100000000 \
        --variants floor floor_sorted floor_first dprelease --data /tmp/bench_data
    # peak memory of a partitioned aggregation: 12·10^6 rows in 40 partitions, against holding
    # every row (engine_whole); the growth column is bytes per input row
    .venv/bin/python bench/bench_engine.py --sizes 12000000 --variants engine engine_whole \
        --rows-per-partition 300000

Prints markdown tables and writes them to bench/results/engine.md. The benchmark data come from
a seeded numpy generator (they are synthetic test data, not noise).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "engine.md"
BENCH_PYTHON = HERE.parent / ".venv-bench" / "bin" / "python"

REGIONS = [f"r{i:02d}" for i in range(50)]
AGE_BANDS = [f"a{i}" for i in range(10)]
MAX_ROWS = 4
INCOME = (0, 200_000)
VISITS = (0, 20)
EPSILON = 1.0
CHUNK = 4_000_000


# --------------------------------------------------------------------------- data


def generate(rows: int, path: Path, seed: int = 20240501) -> None:
    """About rows/4 persons with 1–7 rows each (shuffled), 1% null incomes, a few outliers.

    Written in chunks of `CHUNK` rows (zstd, row groups of 2^17 rows, as polars writes them),
    so 10^8 rows need about 2.5 GB of memory (the shuffled person ids) and 1.3 GB of disk.
    """
    import numpy as np
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 8, size=rows // 4 + rows // 8)
    counts = counts[: int(np.searchsorted(np.cumsum(counts), rows)) + 1]
    counts[-1] -= counts.sum() - rows
    person = np.repeat(np.arange(len(counts), dtype=np.int64), counts)[rng.permutation(rows)]
    with pq.ParquetWriter(path, _chunk(person[:0], rng).schema, compression="zstd") as writer:
        for start in range(0, rows, CHUNK):
            writer.write_table(_chunk(person[start : start + CHUNK], rng), row_group_size=2**17)


def _chunk(person: Any, rng: Any) -> Any:
    """One chunk of the synthetic table (pyarrow) for the given person ids."""
    import numpy as np
    import polars as pl

    rows = len(person)
    income = rng.lognormal(10.5, 1.0, rows)  # ~0.4% above the 200000 bound
    income[rng.random(rows) < 0.01] = np.nan
    return (
        pl.DataFrame(
            {
                "person_id": person,
                "region": np.array(REGIONS)[rng.integers(0, len(REGIONS), rows)],
                "age_band": np.array(AGE_BANDS)[rng.integers(0, len(AGE_BANDS), rows)],
                "income": income,
                "visits": rng.poisson(5.0, rows).astype(np.int64),
            },
            schema_overrides={"region": pl.String, "age_band": pl.String},
        )
        .with_columns(pl.col("income").fill_nan(None))
        .to_arrow()
    )


# --------------------------------------------------------------------------- variants
# Each runs inside a fresh child process and returns (seconds, extra facts for the report).


def _floor(path: str, truncated: Callable[[Any], Any]) -> tuple[float, dict]:
    """A plain polars floor: lazy scan → `truncated` keeps at most 4 rows per person → clamp →
    group-by, `collect(engine="streaming")`; no noise, no key grid, no input summary."""
    import polars as pl

    start = time.perf_counter()
    out = (
        truncated(pl.scan_parquet(path))
        .group_by("region", "age_band")
        .agg(
            pl.len().alias("n"),
            pl.col("income").fill_null(0).clip(*INCOME).sum(),
            pl.col("visits").fill_null(0).clip(*VISITS).sum(),
        )
        .collect(engine="streaming")
    )
    seconds = time.perf_counter() - start
    return seconds, {"cells": out.height, "total": int(out["n"].sum()), "polars": pl.__version__}


def run_floor(path: str) -> tuple[float, dict]:
    """Random rows per person, as the release keeps them: a shuffled row number per person."""
    import polars as pl

    random_rank = pl.int_range(pl.len()).shuffle().over("person_id")
    return _floor(path, lambda lf: lf.filter(random_rank < MAX_ROWS))


def run_floor_sorted(path: str) -> tuple[float, dict]:
    """Not random: each person's first rows after a sort by person, the plain sort-based query."""
    return _floor(
        path,
        lambda lf: lf.sort("person_id").group_by("person_id", maintain_order=True).head(MAX_ROWS),
    )


def run_floor_first(path: str) -> tuple[float, dict]:
    """Not random: each person's first rows in file order (a row number per person, no sort)."""
    import polars as pl

    return _floor(path, lambda lf: lf.filter(pl.int_range(pl.len()).over("person_id") < MAX_ROWS))


def bench_spec() -> dict:
    return {
        "name": "bench_engine",
        "source": "synthetic",
        "privacy_unit": "person_id",
        "max_rows_per_unit": MAX_ROWS,
        "group_by": [
            {"column": "region", "domain": {"values": REGIONS}},
            {"column": "age_band", "domain": {"values": AGE_BANDS}},
        ],
        "statistics": [
            {"name": "n", "kind": "count"},
            {"name": "income", "kind": "sum", "column": "income", "lower": INCOME[0],
             "upper": INCOME[1]},
            {"name": "visits", "kind": "sum", "column": "visits", "lower": VISITS[0],
             "upper": VISITS[1]},
        ],
    }  # fmt: skip


def run_dprelease(path: str) -> tuple[float, dict]:
    import polars as pl

    from dprelease.publish import decide_budget, prepare
    from dprelease.spec import parse_spec

    start = time.perf_counter()
    resolved = parse_spec(bench_spec())
    prepared = prepare(path, resolved, decide_budget(resolved, epsilon=Fraction(EPSILON)))
    planned = time.perf_counter()
    result = prepared.draw()  # production noise source, as `dp.release` does
    seconds = time.perf_counter() - start
    return seconds, {
        "cells": result.table.height,
        "total": int(result.table["n"].sum()),
        "prepare_s": planned - start,
        "polars": pl.__version__,
    }


def _engine_inputs(path: str) -> tuple[Any, Any]:
    """The resolved spec and allocation of the benchmark query (the timed variants start after)."""
    from dprelease.publish import decide_budget, prepare
    from dprelease.spec import parse_spec

    resolved = parse_spec(bench_spec())
    budget = decide_budget(resolved, epsilon=Fraction(EPSILON))
    return resolved, prepare(path, resolved, budget).allocation


def run_engine(path: str, rows_per_partition: int | None = None) -> tuple[float, dict]:
    """The polars engine alone: exact aggregates and the input summary (no planning, key grid
    or noise), partitioned above `rows_per_partition` input rows (default: the engine's)."""
    import polars as pl

    from dprelease.mechanism.engines import EngineJob, new_salt
    from dprelease.mechanism.engines.polars import ROWS_PER_PARTITION, PolarsEngine

    resolved, allocation = _engine_inputs(path)
    engine = PolarsEngine(rows_per_partition or ROWS_PER_PARTITION)
    start = time.perf_counter()
    exact = engine.aggregate(EngineJob(path, resolved, allocation, None), new_salt())
    seconds = time.perf_counter() - start
    total = int(exact.values["n"].sum())
    partitions = -(-_rows_of(path) // engine.rows_per_partition)
    return seconds, {"total": total, "partitions": partitions, "polars": pl.__version__}


def run_engine_whole(path: str) -> tuple[float, dict]:
    """The engine never partitioning: all units bounded at once, every row in memory."""
    return run_engine(path, rows_per_partition=_rows_of(path) + 1)


def run_summary(path: str) -> tuple[float, dict]:
    """The input summary's own scan (`PolarsEngine.summarize`), as a re-run of a released slot
    reads it; `aggregate` makes the same summary in the pass it reads the input in."""
    import polars as pl

    from dprelease.mechanism.engines import EngineJob
    from dprelease.mechanism.engines.polars import PolarsEngine

    resolved, allocation = _engine_inputs(path)
    start = time.perf_counter()
    summary = PolarsEngine().summarize(EngineJob(path, resolved, allocation, None))
    seconds = time.perf_counter() - start
    return seconds, {"total": summary.rows, "polars": pl.__version__}


def run_opendp(path: str) -> tuple[float, dict]:
    from importlib.metadata import version

    import opendp.prelude as dp  # type: ignore[import-not-found]  # .venv-bench only
    import polars as pl

    dp.enable_features("contrib")
    keys = pl.DataFrame({"region": REGIONS}).join(
        pl.DataFrame({"age_band": AGE_BANDS}), how="cross"
    )
    start = time.perf_counter()
    context = dp.Context.compositor(
        data=pl.scan_parquet(path),
        # the unit is one person (one identifier); truncate_per_group bounds its rows
        privacy_unit=dp.unit_of(contributions=1, identifier="person_id"),
        privacy_loss=dp.loss_of(epsilon=EPSILON),
        split_evenly_over=1,
        # float sums need a public bound on group length; the table size is a safe one
        margins=[
            dp.polars.Margin(by=["region", "age_band"], invariant="keys", max_length=_rows_of(path))
        ],
    )
    query = (
        context.query()
        .truncate_per_group(MAX_ROWS)  # keep="sample": random rows per person
        .group_by(["region", "age_band"])
        .agg(
            dp.len(signed=True).alias("n"),
            pl.col("income").fill_null(0).dp.sum(INCOME),  # type: ignore[attr-defined]
            pl.col("visits").fill_null(0).dp.sum(VISITS),  # type: ignore[attr-defined]
        )
        .with_keys(keys)
    )
    released = query.release()
    measured = time.perf_counter()
    out = released.collect()
    seconds = time.perf_counter() - start
    return seconds, {
        "cells": out.height,
        "total": int(out["n"].sum()),
        "collect_s": seconds - (measured - start),
        "polars": pl.__version__,
        "opendp": version("opendp"),
    }


def _rows_of(path: str) -> int:
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    return pq.ParquetFile(path).metadata.num_rows


#: Every variant a child can run, by the name the report gives it (OpenDP's two runs in its own
#: environment are labelled "OpenDP" and `OPENDP_FLOOR`).
VARIANTS: dict[str, Callable[[str], tuple[float, dict]]] = {
    "floor": run_floor,
    "floor_sorted": run_floor_sorted,
    "floor_first": run_floor_first,
    "dprelease": run_dprelease,
    "engine": run_engine,
    "engine_whole": run_engine_whole,
    "summary": run_summary,
    "opendp": run_opendp,
}
#: The floors, each against which every other variant's ratios are reported.
FLOORS = ("floor", "floor_sorted", "floor_first")
DEFAULT_VARIANTS = ["floor", "floor_sorted", "floor_first", "dprelease", "opendp"]
_DPRELEASE = ["polars", "dprelease.publish", "dprelease.spec", "dprelease.mechanism.engines.polars"]
IMPORTS = {
    "floor": ["polars"],
    "floor_sorted": ["polars"],
    "floor_first": ["polars"],
    "dprelease": _DPRELEASE,
    "engine": _DPRELEASE,
    "engine_whole": _DPRELEASE,
    "summary": _DPRELEASE,
    "opendp": ["polars", "opendp.prelude", "pyarrow.parquet"],
}
OPENDP_FLOOR = "floor (OpenDP's polars)"


def child(variant: str, path: str, rows_per_partition: int | None) -> None:
    for module in IMPORTS[variant]:  # imported before the clock and the RSS baseline
        importlib.import_module(module)
    baseline = _status_kib("VmRSS")
    cpu = time.process_time()
    if variant == "engine":
        seconds, facts = run_engine(path, rows_per_partition)
    else:
        seconds, facts = VARIANTS[variant](path)
    cpu = time.process_time() - cpu
    peak = _status_kib("VmHWM")
    print(
        json.dumps(
            {
                "seconds": seconds,
                "cpu_s": cpu,
                "rss_after_imports_kib": baseline,
                "peak_kib": peak,
                **facts,
            }
        )
    )


def _status_kib(field: str) -> int:
    """VmRSS (now) or VmHWM (peak) of this process, in KiB. The peak is read here rather than
    taken from wait4: a child started by posix_spawn (vfork) inherits the parent's high-water
    mark in ru_maxrss, so a parent that just generated 10^8 rows would inflate every figure."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status (the benchmark needs Linux)")


# --------------------------------------------------------------------------- parent


def measure(
    python: Path, variant: str, path: Path, out_dir: Path, rows_per_partition: int | None
) -> dict:
    """One fresh child: its own timing and peak RSS (KiB), plus its wall time seen from here."""
    out = out_dir / f"{variant}.json"
    err = out_dir / f"{variant}.err"
    argv = [str(python), __file__, "--child", variant, "--path", str(path)]
    if rows_per_partition:
        argv += ["--rows-per-partition", str(rows_per_partition)]
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    pid = os.posix_spawn(
        str(python),
        argv,
        os.environ,
        file_actions=[
            (os.POSIX_SPAWN_OPEN, 1, str(out), flags, 0o600),
            (os.POSIX_SPAWN_OPEN, 2, str(err), flags, 0o600),
        ],
    )
    started = time.perf_counter()
    _, status = os.waitpid(pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        tail = err.read_text().strip().splitlines()[-3:]
        return {"error": " / ".join(tail) or f"exit status {status}"}
    result = json.loads(out.read_text().strip().splitlines()[-1])
    return {**result, "process_s": wall}


def interleaved(
    plan: list[tuple[str, str, Path]], path: Path, args: Any, out: Path
) -> dict[str, list[dict]]:
    """`args.repeats` rounds of every variant in turn, so a change in the machine's load hits
    all of them alike; every run of each label, with the 1-minute load average before it."""
    runs: dict[str, list[dict]] = {label: [] for _, label, _ in plan}
    for _ in range(args.repeats):
        for variant, label, python in plan:
            load = os.getloadavg()[0]
            result = measure(python, variant, path, out, args.rows_per_partition)
            runs[label].append({**result, "load": load})
            print(f"  {label}: {_brief(runs[label][-1])}", file=sys.stderr, flush=True)
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**6, 10**7])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=sorted(VARIANTS),
        default=DEFAULT_VARIANTS,
        help="opendp also runs the floor under OpenDP's polars",
    )
    parser.add_argument(
        "--rows-per-partition",
        type=int,
        help="input rows per partition of the engine variant (default: the engine's own)",
    )
    parser.add_argument(
        "--data",
        type=Path,
        help="keep the generated parquet files in this directory and reuse them (default: a "
        "temporary directory, removed at the end)",
    )
    parser.add_argument("--bench-python", type=Path, default=BENCH_PYTHON)
    parser.add_argument("--child", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.path, args.rows_per_partition)
        return 0

    here = Path(sys.executable)
    plan = [(v, v, here) for v in VARIANTS if v in args.variants and v != "opendp"]
    notes = []
    if "opendp" not in args.variants:
        notes.append("OpenDP not run (--variants).")
    elif not args.bench_python.exists():
        notes.append(f"OpenDP skipped: {args.bench_python} missing (run bash bench/setup.sh).")
    else:
        plan += [
            ("floor", OPENDP_FLOOR, args.bench_python),
            ("opendp", "OpenDP", args.bench_python),
        ]

    measured, ratios, done = [], [], []
    with tempfile.TemporaryDirectory(prefix="bench_engine_") as tmp:
        data_dir = args.data or Path(tmp)
        data_dir.mkdir(parents=True, exist_ok=True)
        for size in args.sizes:
            path = data_dir / f"synthetic_{size}.parquet"
            if not path.exists():
                start = time.perf_counter()
                generate(size, path)
                print(
                    f"{size:,} rows: parquet {path.stat().st_size / 2**20:.0f} MiB "
                    f"in {time.perf_counter() - start:.1f} s",
                    file=sys.stderr,
                    flush=True,
                )
            runs = interleaved(plan, path, args, Path(tmp))
            if args.data is None:
                path.unlink()
            measured += _measured_rows(size, runs)
            ratios += _ratio_rows(size, runs)
            done += [r for label_runs in runs.values() for r in label_runs if "error" not in r]

    versions = sorted({r["polars"] for r in done})
    opendp = next((r["opendp"] for r in done if "opendp" in r), None)
    header = [
        "# Release engine: dprelease vs plain polars floors vs OpenDP",
        "",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"{_total_memory_gib():.0f} GiB, Python {platform.python_version()}, polars "
        f"{', '.join(versions)}" + (f", OpenDP {opendp}" if opendp else "") + ". Query: count, "
        "sum(income, 0, 200000), sum(visits, 0, 20) by region × age_band (500 public cells), "
        f"≤ {MAX_ROWS} random rows per person, ε = {EPSILON:g}.",
        "",
        "Variants: floor = plain polars keeping random rows per person (a shuffled row number "
        "per person); floor_sorted = each person's first rows after a sort by person; "
        "floor_first = each person's first rows in file order (the last two are not random, not "
        "the same query); dprelease = `prepare` + `draw` (the release without ledger or files); "
        "engine = the polars engine's exact aggregates and input summary alone; engine_whole = "
        "the same never partitioned; summary = the input summary's own scan.",
        "",
        f"{args.repeats} fresh processes per variant, the variants taking turns; median "
        "[min–max]. Time is measured inside the process (interpreter start and imports "
        "excluded); CPU is user + system time, which a loaded machine distorts less than the "
        "wall time. Peak RSS is the process's high-water mark (the interpreter and imports "
        "included); growth is that peak beyond the RSS right after the imports, per input row. "
        "Ratios are taken run by run within a round, against each floor on the same polars "
        "version. Load: the 1-minute load average before the variant's runs.",
        "",
        "| rows | variant | time (s) | CPU (s) | peak RSS (MiB) | growth (B/row) | load | notes |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |",
        *measured,
        "",
        "| rows | variant | against | time | CPU | peak RSS |",
        "| ---: | --- | --- | ---: | ---: | ---: |",
        *ratios,
    ]
    table = "\n".join(header + [""] + notes) + "\n"
    print(table)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(table)
    return 0


def _brief(result: dict) -> str:
    if "error" in result:
        return f"FAILED: {result['error']}"
    return (
        f"{result['seconds']:.2f} s, CPU {result['cpu_s']:.2f} s; "
        f"peak {result['peak_kib'] / 1024:.0f} MiB; "
        f"total {result['total']:,}; load {result['load']:.1f}"
    )


def _spread(values: list[float], unit: str = "", digits: int = 2) -> str:
    """Median [min–max]."""
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{mid:.{digits}f}{unit} [{low:.{digits}f}–{high:.{digits}f}]"


def _measured_rows(size: int, runs: dict[str, list[dict]]) -> list[str]:
    out = []
    for label, done in runs.items():
        failed = next((r for r in done if "error" in r), None)
        if failed:
            out.append(f"| {size:,} | {label} |{' — |' * 5} failed: {failed['error']} |")
            continue
        growth = [(r["peak_kib"] - r["rss_after_imports_kib"]) * 1024 / size for r in done]
        noisy = " (noisy)" if label in ("dprelease", "OpenDP") else ""
        notes = [] if label == "summary" else [f"kept rows {done[0]['total']:,}{noisy}"]
        for fact, name in (("prepare_s", "prepare"), ("collect_s", "collect alone")):
            if fact in done[0]:
                notes.append(f"{name} {_spread([r[fact] for r in done])} s")
        if "partitions" in done[0]:
            notes.append(f"{done[0]['partitions']} partition(s)")
        loads = [r["load"] for r in done]
        out.append(
            f"| {size:,} | {label} | {_spread([r['seconds'] for r in done])} "
            f"| {_spread([r['cpu_s'] for r in done])} "
            f"| {_spread([r['peak_kib'] / 1024 for r in done], digits=0)} "
            f"| {_spread(growth, digits=1)} | {min(loads):.1f}–{max(loads):.1f} "
            f"| {'; '.join(notes)} |"
        )
    return out


def _ratio_rows(size: int, runs: dict[str, list[dict]]) -> list[str]:
    """Each variant against each floor on its polars version, run by run within a round."""
    ok = {label: done for label, done in runs.items() if all("error" not in r for r in done)}
    floors = [label for label in (*FLOORS, OPENDP_FLOOR) if label in ok]
    out = []
    for label, done in ok.items():
        for floor in floors:
            base = ok[floor]
            # floors against the floors after them only; every variant on its polars version
            before = label in floors and floors.index(label) >= floors.index(floor)
            if before or base[0]["polars"] != done[0]["polars"]:
                continue
            cells = [
                _spread([r[key] / b[key] for r, b in zip(done, base, strict=True)], "×")
                for key in ("seconds", "cpu_s", "peak_kib")
            ]
            out.append(f"| {size:,} | {label} | {floor} | {' | '.join(cells)} |")
    return out


def _total_memory_gib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


if __name__ == "__main__":
    sys.exit(main())
