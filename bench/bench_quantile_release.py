"""What a quantile statistic adds to a release: the engine benchmark's query with and without it.

The data and the query are bench_engine.py's (≈N/4 persons with 1–7 rows each, 50 regions ×
10 age bands, at most 4 random rows per person, ε = 1). Variants, each through `dp.release` on
the parquet file with the OS CSPRNG (no ledger):

* counts_sums: count, sum(income, 0, 200000), sum(visits, 0, 20) — the engine benchmark;
* with_quartiles: the same plus the quartiles of income on a grid of 200 (1,001 points), each
  with its 95% interval;
* quartiles: the count and the quartiles alone.

Every measurement is a fresh child process timing the release inside it (imports excluded);
the variants take turns for `--repeats` rounds, and each round's ratio to counts_sums is taken
within the round, so a load change between rounds does not bias it. Prints median (range) of
the times and of the per-round ratios, and the load average.

    .venv/bin/python bench/bench_quantile_release.py --rows 10000000 --data /tmp/bench_data
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_engine import bench_spec, generate  # noqa: E402

QUARTILES = {
    "name": "income_q",
    "kind": "quantile",
    "column": "income",
    "lower": 0,
    "upper": 200_000,
    "resolution": 200,
    "p": [0.25, 0.5, 0.75],
}
VARIANTS = ("counts_sums", "with_quartiles", "quartiles")


def spec_of(variant: str) -> dict:
    spec = bench_spec()
    if variant == "with_quartiles":
        spec["statistics"] = [*spec["statistics"], QUARTILES]
    elif variant == "quartiles":
        spec["statistics"] = [spec["statistics"][0], QUARTILES]
    return spec


def child(variant: str, path: str) -> None:
    import dprelease as dp

    spec = dp.ReleaseSpec.model_validate(spec_of(variant))
    start = time.perf_counter()
    result = dp.release(path, spec, epsilon=1)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "cells": result.table.height}))


def measure(variant: str, path: Path) -> float:
    done = subprocess.run(
        [sys.executable, __file__, "--child", variant, str(path)],
        check=True,
        capture_output=True,
        text=True,
    )
    return float(json.loads(done.stdout.splitlines()[-1])["seconds"])


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], sys.argv[3])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", type=Path, default=None, help="keep the data here")
    args = parser.parse_args()
    folder = args.data or Path(tempfile.mkdtemp(prefix="bench-quantiles-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"synthetic_{args.rows}.parquet"
    if not path.exists():
        generate(args.rows, path)
    load_start = os.getloadavg()[0]
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for _ in range(args.repeats):
        for variant in VARIANTS:
            times[variant].append(measure(variant, path))
            print(variant, f"{times[variant][-1]:.2f} s", file=sys.stderr, flush=True)
    load_end = os.getloadavg()[0]
    lines = [
        f"| variant | time, median (range) of {args.repeats} | ÷ counts_sums, per round |",
        "| --- | ---: | ---: |",
    ]
    for variant in VARIANTS:
        ts = times[variant]
        ratios = [t / base for t, base in zip(ts, times["counts_sums"], strict=True)]
        lines.append(
            f"| {variant} | {statistics.median(ts):.2f} s ({min(ts):.2f}–{max(ts):.2f}) | "
            f"{statistics.median(ratios):.2f}× ({min(ratios):.2f}–{max(ratios):.2f}) |"
        )
    lines.append(
        f"\n{args.rows:,} rows, {os.cpu_count()} cores; load average {load_start:.1f} at the "
        f"start, {load_end:.1f} at the end."
    )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
