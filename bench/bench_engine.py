"""End-to-end release cost: dprelease against a plain polars floor and OpenDP's polars API.

One query on one synthetic parquet file per size: count, sum(income, 0, 200000) and
sum(visits, 0, 20) by region × age_band (50 × 10 public keys), at most 4 rows per person
(kept at random), ε = 1. Variants:

* floor: plain polars, lazy scan → random row rank over person_id ≤ 4 → clamp → group-by,
  `collect(engine="streaming")`, no noise, no key grid;
* dprelease: `release(path, spec, 1.0)` with the production (OS CSPRNG) noise source, i.e.
  validation, planning, the streaming aggregation, noise for the full grid and the manifest;
* OpenDP: `Context.compositor` over `pl.scan_parquet`, identifier `person_id`,
  `truncate_per_group(4)`, public keys, `dp.len` and `dp.sum`, run in `.venv-bench` (OpenDP
  pins its own polars) — timed end to end and for the final `collect` alone;
* floor under OpenDP's polars version, so the polars version itself can be told apart;
* for reference, the floor keeping each person's *first* 4 rows in file order: no randomness, not
  the same query (the issue requires a random choice of rows).

Every measurement is a fresh child process: time is measured inside it (imports excluded),
peak memory is the child's RSS high-water mark from `wait4`. Best time of `--repeats` runs
(other processes may share the machine), largest peak RSS of those runs.

    bash bench/setup.sh                                   # once: .venv-bench with OpenDP
    .venv/bin/python bench/bench_engine.py                # 1M and 10M rows, ~5 minutes
    .venv/bin/python bench/bench_engine.py --sizes 1000000 --no-opendp

Prints a markdown table and writes it to bench/results/engine.md. The benchmark data come from
a seeded numpy generator (they are synthetic test data, not noise).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "engine.md"
BENCH_PYTHON = HERE.parent / ".venv-bench" / "bin" / "python"

REGIONS = [f"r{i:02d}" for i in range(50)]
AGE_BANDS = [f"a{i}" for i in range(10)]
MAX_ROWS = 4
INCOME = (0, 200_000)
VISITS = (0, 20)
EPSILON = 1.0
FIRST_ROWS = "floor, first rows in file order (not random)"


# --------------------------------------------------------------------------- data


def generate(rows: int, path: Path, seed: int = 20240501) -> None:
    """About rows/4 persons with 1–7 rows each (shuffled), 1% null incomes, a few outliers."""
    import numpy as np
    import polars as pl

    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 8, size=rows // 4 + rows // 8)
    counts = counts[: int(np.searchsorted(np.cumsum(counts), rows)) + 1]
    counts[-1] -= counts.sum() - rows
    person = np.repeat(np.arange(len(counts), dtype=np.int64), counts)[rng.permutation(rows)]
    income = rng.lognormal(10.5, 1.0, rows)  # ~0.4% above the 200000 bound
    income[rng.random(rows) < 0.01] = np.nan
    pl.DataFrame(
        {
            "person_id": person,
            "region": np.array(REGIONS)[rng.integers(0, len(REGIONS), rows)],
            "age_band": np.array(AGE_BANDS)[rng.integers(0, len(AGE_BANDS), rows)],
            "income": income,
            "visits": rng.poisson(5.0, rows).astype(np.int64),
        }
    ).with_columns(pl.col("income").fill_nan(None)).write_parquet(path)


# --------------------------------------------------------------------------- variants
# Each runs inside a fresh child process and returns (seconds, extra facts for the report).


def run_floor(path: str, random_rows: bool = True) -> tuple[float, dict]:
    import polars as pl

    position = pl.int_range(pl.len())
    position = position.shuffle() if random_rows else position
    start = time.perf_counter()
    out = (
        pl.scan_parquet(path)
        .filter(position.over("person_id") < MAX_ROWS)
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


def run_floor_first(path: str) -> tuple[float, dict]:
    """Not the same query: keeps each person's first rows in file order (no randomness)."""
    return run_floor(path, random_rows=False)


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

    from dprelease.release import prepare
    from dprelease.spec import parse_spec

    start = time.perf_counter()
    prepared = prepare(path, parse_spec(bench_spec()), EPSILON)
    planned = time.perf_counter()
    result = prepared.run()  # production noise source, as `release(path, loaded, 1.0)` does
    seconds = time.perf_counter() - start
    return seconds, {
        "cells": result.table.height,
        "total": int(result.table["n"].sum()),
        "prepare_s": planned - start,
        "polars": pl.__version__,
    }


def run_opendp(path: str) -> tuple[float, dict]:
    from importlib.metadata import version

    import opendp.prelude as dp
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
            pl.col("income").fill_null(0).dp.sum(INCOME),
            pl.col("visits").fill_null(0).dp.sum(VISITS),
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
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows


VARIANTS = {
    "floor": run_floor,
    "floor_first": run_floor_first,
    "dprelease": run_dprelease,
    "opendp": run_opendp,
}
IMPORTS = {
    "floor": ["polars"],
    "floor_first": ["polars"],
    "dprelease": ["polars", "dprelease.release", "dprelease.spec"],
    "opendp": ["polars", "opendp.prelude", "pyarrow.parquet"],
}


def child(variant: str, path: str) -> None:
    for module in IMPORTS[variant]:  # imported before the clock and the RSS baseline
        importlib.import_module(module)
    baseline = _rss_now_kib()
    seconds, facts = VARIANTS[variant](path)
    print(json.dumps({"seconds": seconds, "rss_after_imports_kib": baseline, **facts}))


def _rss_now_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


# --------------------------------------------------------------------------- parent


def measure(python: Path, variant: str, path: Path, out_dir: Path) -> dict:
    """One fresh child: its own timing plus its peak RSS (KiB on Linux) from wait4."""
    out = out_dir / f"{variant}.json"
    err = out_dir / f"{variant}.err"
    argv = [str(python), __file__, "--child", variant, "--path", str(path)]
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
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        tail = err.read_text().strip().splitlines()[-3:]
        return {"error": " / ".join(tail) or f"exit status {status}"}
    result = json.loads(out.read_text().strip().splitlines()[-1])
    return {**result, "peak_kib": usage.ru_maxrss, "process_s": wall}


def best_of(python: Path, variant: str, path: Path, repeats: int, out_dir: Path) -> dict:
    runs = [measure(python, variant, path, out_dir) for _ in range(repeats)]
    failed = [r for r in runs if "error" in r]
    if failed:
        return failed[0]
    best = min(runs, key=lambda r: r["seconds"])
    return {
        **best,
        "times": [r["seconds"] for r in runs],
        "peak_kib": max(r["peak_kib"] for r in runs),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**6, 10**7])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-opendp", action="store_true", help="skip the .venv-bench runs")
    parser.add_argument("--bench-python", type=Path, default=BENCH_PYTHON)
    parser.add_argument("--child", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.path)
        return 0

    here = Path(sys.executable)
    plan = [
        ("floor", "floor", here),
        ("floor_first", FIRST_ROWS, here),
        ("dprelease", "dprelease", here),
    ]
    notes = []
    if args.no_opendp:
        notes.append("OpenDP skipped (--no-opendp).")
    elif not args.bench_python.exists():
        notes.append(f"OpenDP skipped: {args.bench_python} missing (run bash bench/setup.sh).")
    else:
        plan += [
            ("floor", "floor, OpenDP's polars", args.bench_python),
            ("opendp", "OpenDP", args.bench_python),
        ]

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_engine_") as tmp:
        tmp_dir = Path(tmp)
        for size in args.sizes:
            path = tmp_dir / f"synthetic_{size}.parquet"
            start = time.perf_counter()
            generate(size, path)
            print(
                f"{size:,} rows: parquet {path.stat().st_size / 2**20:.0f} MiB "
                f"in {time.perf_counter() - start:.1f} s",
                file=sys.stderr,
                flush=True,
            )
            results = {}
            for variant, label, python in plan:
                results[label] = best_of(python, variant, path, args.repeats, tmp_dir)
                print(f"  {label}: {_brief(results[label])}", file=sys.stderr, flush=True)
            path.unlink()
            rows += _table_rows(size, results)

    load = os.getloadavg()
    versions = {label: r.get("polars") for label, r in results.items() if "polars" in r}
    opendp = next((r["opendp"] for r in results.values() if "opendp" in r), None)
    header = [
        "# Release engine: dprelease vs a plain polars floor vs OpenDP",
        "",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"{_total_memory_gib():.0f} GiB, Python {platform.python_version()}, polars "
        f"{versions.get('floor')} (floor, dprelease)"
        + (f", OpenDP {opendp} with polars {versions.get('OpenDP')}" if opendp else "")
        + f"; load average at the end {load[0]:.1f}. Query: count, sum(income, 0, 200000), "
        f"sum(visits, 0, 20) by region × age_band (500 public cells), ≤ {MAX_ROWS} random rows "
        f"per person, ε = {EPSILON:g}.",
        "",
        f"Time: best of {args.repeats} fresh processes, measured inside the process "
        "(interpreter start and imports excluded). Peak RSS: largest high-water mark of the "
        "same processes (includes the interpreter and imports; RSS right after imports in "
        "brackets). Ratios are against the floor on the same polars version.",
        "",
        "| rows | variant | time (s) | peak RSS (MiB) | time / floor | RSS / floor | notes |",
        "| ---: | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    table = "\n".join(header + rows + [""] + notes) + "\n"
    print(table)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(table)
    return 0


def _brief(result: dict) -> str:
    if "error" in result:
        return f"FAILED: {result['error']}"
    times = ", ".join(f"{t:.2f}" for t in result["times"])
    return f"{times} s; peak {result['peak_kib'] / 1024:.0f} MiB; total {result['total']:,}"


def _table_rows(size: int, results: dict) -> list[str]:
    floors = {
        results[label]["polars"]: results[label]
        for label in ("floor", "floor, OpenDP's polars")
        if label in results and "error" not in results[label]
    }
    opendp = results.get("OpenDP")
    out = []
    for label, r in results.items():
        if "error" in r:
            out.append(f"| {size:.0e} | {label} | — | — | — | — | failed: {r['error']} |")
            continue
        floor = floors.get(r["polars"])
        time_ratio = f"{r['seconds'] / floor['seconds']:.2f}×" if floor else "—"
        rss_ratio = f"{r['peak_kib'] / floor['peak_kib']:.2f}×" if floor else "—"
        noisy = "" if label.startswith("floor") else " (noisy)"
        notes = [f"kept rows {r['total']:,}{noisy}"]
        if "prepare_s" in r:
            notes.append(f"prepare {r['prepare_s']:.2f} s")
        if "collect_s" in r:
            notes.append(f"collect alone {r['collect_s']:.2f} s")
        first = results.get(FIRST_ROWS)
        if label == "dprelease" and first and "error" not in first:
            notes.append(
                f"{r['seconds'] / first['seconds']:.2f}× time, "
                f"{r['peak_kib'] / first['peak_kib']:.2f}× RSS of the file-order floor"
            )
        if label == "dprelease" and opendp and "error" not in opendp:
            notes.append(f"{opendp['seconds'] / r['seconds']:.1f}× faster than OpenDP")
        out.append(
            f"| {size:.0e} | {label} | {r['seconds']:.2f} | {r['peak_kib'] / 1024:.0f} "
            f"[{r['rss_after_imports_kib'] / 1024:.0f}] | {time_ratio} | {rss_ratio} | "
            f"{'; '.join(notes)} |"
        )
    return out


def _total_memory_gib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


if __name__ == "__main__":
    sys.exit(main())
