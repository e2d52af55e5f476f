"""The cost of exact margins of error (`moe95`) against its floor, the exact variances.

A release with margins states every value's exact 95% margin of error before any data is read.
The same numbers with a normal approximation (1.96·sd) would cost only `level_variances` (the
Woodbury solves both share), so that is the floor: the ratio moe95 / level_variances is what the
exact quantiles cost on top. Counted per hierarchy (region × clinic, margins [[region], []]) and
per noise: discrete Laplace at an equal split of ε = 1, discrete Gaussian (σ² 18, 9, 40), and a
mix (Gaussian cells and total, Laplace regions). Each pair is timed in turn, `--repeats` times,
after one warm-up; medians and ranges are printed with the load average.

    .venv/bin/python bench/bench_moe.py
    .venv/bin/python bench/bench_moe.py --repeats 7 --skip-large
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import polars as pl

from dprelease.loss import split_by_weights
from dprelease.mechanism.margins._consistency import level_variances
from dprelease.mechanism.margins._moe import moe95
from dprelease.mechanism.noise import NoiseLaw
from dprelease.spec import Levels


def hierarchy(clinics: list[int]) -> pl.DataFrame:
    rows = [(f"r{r}", f"c{r}.{c}") for r, n in enumerate(clinics) for c in range(n)]
    return pl.DataFrame(rows, schema=["region", "clinic"], orient="row")


def hierarchies(skip_large: bool) -> dict[str, list[int]]:
    out = {"8 regions, 31 cells": [2, 3, 4, 5, 6, 2, 3, 6], "12 regions, 120 cells": [10] * 12}
    if not skip_large:
        big = np.random.default_rng(0).integers(50, 151, 100)
        big[-1] += 10_000 - big.sum()
        out["100 regions, 10⁴ cells"] = [int(n) for n in big]
    return out


NOISE = {
    "Laplace": [NoiseLaw.laplace(1 / s) for s in split_by_weights(Fraction(1), [Fraction(1)] * 3)],
    "Gaussian": [NoiseLaw.gaussian(s) for s in (18, 9, 40)],
    "mixed": [NoiseLaw.gaussian(18), NoiseLaw.laplace(3), NoiseLaw.gaussian(40)],
}


def seconds(
    fn: Callable[[Levels, list[NoiseLaw]], object], levels: Levels, laws: list[NoiseLaw]
) -> float:
    start = time.perf_counter()
    fn(levels, laws)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-large", action="store_true", help="leave out the 10⁴ cells")
    args = parser.parse_args()
    print(f"load average at start {os.getloadavg()[0]:.1f}; {args.repeats} pairs each\n")
    print("| hierarchy | noise | moe95 ms | level_variances ms | ratio (median, range) |")
    print("|---|---|---:|---:|---:|")
    for name, clinics in hierarchies(args.skip_large).items():
        levels = Levels.build(hierarchy(clinics), [["region"], []])
        for noise, laws in NOISE.items():
            moe95(levels, laws)  # warm-up: lazy imports, caches
            pairs = [
                (
                    seconds(moe95, levels, laws),
                    seconds(level_variances, levels, laws),
                )
                for _ in range(args.repeats)
            ]
            ours, floor = (statistics.median(p[i] for p in pairs) * 1e3 for i in (0, 1))
            ratios = [a / b for a, b in pairs]
            print(
                f"| {name} | {noise} | {ours:.1f} | {floor:.1f} | "
                f"{statistics.median(ratios):.1f} ({min(ratios):.1f}–{max(ratios):.1f}) |"
            )
    print(f"\nload average at end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
