"""End-to-end release cost: dprelease against a plain polars floor and OpenDP's polars API.

One query on one synthetic parquet file per size: count, sum(income, 0, 200000) and
sum(visits, 0, 20) by region × age_band (50 × 10 public keys), at most 4 rows per person
(kept at random), ε = 1. Variants:

* floor: plain polars, lazy scan → random row rank over person_id ≤ 4 → clamp → group-by,
  `collect(engine="streaming")`, no noise, no key grid;
* dprelease: `release(path, spec, 1.0)` with the production (OS CSPRNG) noise source, i.e.
  validation, planning, the aggregation (partitioned by person above 2·10^6 rows, see
  dprelease/engines/polars.py), noise for the full grid and the manifest;
* OpenDP: `Context.compositor` over `pl.scan_parquet`, identifier `person_id`,
  `truncate_per_group(4)`, public keys, `dp.len` and `dp.sum`, run in `.venv-bench` (OpenDP
  pins its own polars) — timed end to end and for the final `collect` alone;
* floor under OpenDP's polars version, so the polars version itself can be told apart;
* for reference, the floor keeping each person's *first* 4 rows in file order: no randomness, not
  the same query (the issue requires a random choice of rows).

Every measurement is a fresh child process: time is measured inside it (imports excluded),
peak memory is the child's RSS high-water mark (VmHWM). The variants take turns, `--repeats`
rounds; best time of each (other processes may share the machine), largest peak RSS, and the
load average seen, since a loaded machine slows every variant.

    bash bench/setup.sh                                   # once: .venv-bench with OpenDP
    .venv/bin/python bench/bench_engine.py                # 1M and 10M rows, ~5 minutes
    .venv/bin/python bench/bench_engine.py --sizes 1000000 --variants floor dprelease
    # the README's table: 10^7 and 10^8 rows (the data need 1.7 GB of disk; --data keeps them)
    .venv/bin/python bench/bench_engine.py --sizes 10000000 100000000 \
        --variants floor dprelease --data /tmp/bench_data

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
FIRST_ROWS = "floor, first rows in file order (not random)"


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

    from dprelease.publish import decide_budget, prepare
    from dprelease.spec import parse_spec

    start = time.perf_counter()
    resolved = parse_spec(bench_spec())
    prepared = prepare(path, resolved, decide_budget(resolved, epsilon=EPSILON))
    planned = time.perf_counter()
    result = prepared.draw()  # production noise source, as `release(path, loaded, 1.0)` does
    seconds = time.perf_counter() - start
    return seconds, {
        "cells": result.table.height,
        "total": int(result.table["n"].sum()),
        "prepare_s": planned - start,
        "polars": pl.__version__,
    }


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


VARIANTS = {
    "floor": run_floor,
    "floor_first": run_floor_first,
    "dprelease": run_dprelease,
    "opendp": run_opendp,
}
IMPORTS = {
    "floor": ["polars"],
    "floor_first": ["polars"],
    "dprelease": ["polars", "dprelease.pure_release", "dprelease.spec"],
    "opendp": ["polars", "opendp.prelude", "pyarrow.parquet"],
}


def child(variant: str, path: str) -> None:
    for module in IMPORTS[variant]:  # imported before the clock and the RSS baseline
        importlib.import_module(module)
    baseline = _status_kib("VmRSS")
    cpu = time.process_time()
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


def measure(python: Path, variant: str, path: Path, out_dir: Path) -> dict:
    """One fresh child: its own timing and peak RSS (KiB), plus its wall time seen from here."""
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
    _, status = os.waitpid(pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        tail = err.read_text().strip().splitlines()[-3:]
        return {"error": " / ".join(tail) or f"exit status {status}"}
    result = json.loads(out.read_text().strip().splitlines()[-1])
    return {**result, "process_s": wall}


def interleaved(plan: list[tuple[str, str, Path]], path: Path, args: Any, out: Path) -> dict:
    """`args.repeats` rounds of every variant in turn, so a change in the machine's load hits
    all of them alike; per variant the best time, the least CPU time, the largest peak RSS and
    the highest 1-minute load average seen before one of its runs."""
    runs: dict[str, list[dict]] = {label: [] for _, label, _ in plan}
    for _ in range(args.repeats):
        for variant, label, python in plan:
            load = os.getloadavg()[0]
            runs[label].append({**measure(python, variant, path, out), "load": load})
            print(f"  {label}: {_brief(runs[label][-1])}", file=sys.stderr, flush=True)
    results = {}
    for label, done in runs.items():
        failed = [r for r in done if "error" in r]
        best = failed[0] if failed else min(done, key=lambda r: r["seconds"])
        results[label] = {
            **best,
            "cpu_s": min(r.get("cpu_s", 0) for r in done),
            "peak_kib": max(r.get("peak_kib", 0) for r in done),
            "load": max(r["load"] for r in done),
        }
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**6, 10**7])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=["floor", "floor_first", "dprelease", "opendp"],
        default=["floor", "floor_first", "dprelease", "opendp"],
        help="opendp also runs the floor under OpenDP's polars",
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
        child(args.child, args.path)
        return 0

    here = Path(sys.executable)
    labels = {"floor": "floor", "floor_first": FIRST_ROWS, "dprelease": "dprelease"}
    plan = [(v, labels[v], here) for v in labels if v in args.variants]
    notes = []
    if "opendp" not in args.variants:
        notes.append("OpenDP not run (--variants).")
    elif not args.bench_python.exists():
        notes.append(f"OpenDP skipped: {args.bench_python} missing (run bash bench/setup.sh).")
    else:
        plan += [
            ("floor", "floor, OpenDP's polars", args.bench_python),
            ("opendp", "OpenDP", args.bench_python),
        ]

    rows = []
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
            results = interleaved(plan, path, args, Path(tmp))
            if args.data is None:
                path.unlink()
            rows += _table_rows(size, results)

    versions = {label: r.get("polars") for label, r in results.items() if "polars" in r}
    opendp = next((r["opendp"] for r in results.values() if "opendp" in r), None)
    header = [
        "# Release engine: dprelease vs a plain polars floor vs OpenDP",
        "",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"{_total_memory_gib():.0f} GiB, Python {platform.python_version()}, polars "
        f"{versions.get('floor')} (floor, dprelease)"
        + (f", OpenDP {opendp} with polars {versions.get('OpenDP')}" if opendp else "")
        + f". Query: count, sum(income, 0, 200000), sum(visits, 0, 20) by region × age_band "
        f"(500 public cells), ≤ {MAX_ROWS} random rows per person, ε = {EPSILON:g}.",
        "",
        f"Time: best of {args.repeats} fresh processes, the variants taking turns, measured "
        "inside the process (interpreter start and imports excluded); CPU: the least user + "
        "system time of those runs, which a loaded machine distorts less than the wall time. "
        "Peak RSS: largest high-water mark of the same processes (includes the interpreter and "
        "imports; RSS right after imports in brackets). Ratios are against the floor on the "
        "same polars version. Load: the highest 1-minute load average seen before a run of the "
        "variant.",
        "",
        "| rows | variant | time (s) | CPU (s) | peak RSS (MiB) | time / floor | CPU / floor "
        "| RSS / floor | load | notes |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    table = "\n".join(header + rows + [""] + notes) + "\n"
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
            out.append(f"| {size:.0e} | {label} |{' — |' * 7} failed: {r['error']} |")
            continue
        floor = floors.get(r["polars"])
        time_ratio = f"{r['seconds'] / floor['seconds']:.2f}×" if floor else "—"
        cpu_ratio = f"{r['cpu_s'] / floor['cpu_s']:.2f}×" if floor else "—"
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
            f"| {size:.0e} | {label} | {r['seconds']:.2f} | {r['cpu_s']:.2f} | "
            f"{r['peak_kib'] / 1024:.0f} [{r['rss_after_imports_kib'] / 1024:.0f}] | "
            f"{time_ratio} | {cpu_ratio} | {rss_ratio} | {r['load']:.1f} | {'; '.join(notes)} |"
        )
    return out


def _total_memory_gib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


if __name__ == "__main__":
    sys.exit(main())
