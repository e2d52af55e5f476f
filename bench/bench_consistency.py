"""Accuracy and speed of consistent margins (issue 13), at the same total ε.

Counts with margins [[region], []] on three region × clinic hierarchies: the demo's 32 visit
clinics (8 regions × 4, Δ = 4 as in pipelines/specs/visits_monthly.yaml, truth = January 2024's
raw visit counts of the demo data), the issue's synthetic hierarchy (8 regions, 2–6 clinics) and
a 10⁴-cell one (100 regions, 50–150 clinics). Over R seeded releases, the mean absolute error of
region totals and of the grand total from:

  (a)  the level's own noisy measurement, ε split equally over the three levels
       (what separate specs give today);
  (b)  the sum of the noisy cells, same release (cells at ε/3);
  (c)  the consistent estimate from that same release;
  (a′) the level measured alone with the whole ε (a release of that level only);
  (b′) the sum of noisy cells measured alone with the whole ε;
  (c⁺) (c) made nonnegative and integer (`consistent_nonnegative` + `round_additive`);
       not on the 10⁴-cell grid, where those two steps take ~1 s per release.

The errors of (a)–(c), (a′), (b′) do not depend on the data (the estimators are linear); only
(c⁺) does. Seeded noise (NoiseSource.seeded_for_tests): a benchmark, not a release.

    .venv/bin/python bench/bench_consistency.py                  # 200 releases
    .venv/bin/python bench/bench_consistency.py --releases 1000

Prints markdown tables (accuracy, then solve times at 10⁴ cells).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import polars as pl

from dprelease.consistency import (
    Levels,
    NoiseLaw,
    consistent,
    consistent_nonnegative,
    level_variances,
    moe95,
    round_additive,
    split_epsilon,
)
from dprelease.noise import NoiseSource, discrete_laplace

METHODS = ("a", "b", "c", "a_full", "b_full", "c_plus")
_PLUS_MAX_CELLS = 1000


def demo_visits() -> tuple[pl.DataFrame, np.ndarray]:
    """The demo's public clinic grid and January 2024's raw visit counts per clinic."""
    from pipelines.demo_data import clinic_keys, generate_visits

    grid = clinic_keys()
    visits = generate_visits().filter(pl.col("visit_date").dt.month() == 1)
    counts = visits.group_by("region", "clinic").len()
    joined = grid.join(counts, on=["region", "clinic"], how="left", maintain_order="left")
    return grid, joined["len"].fill_null(0).to_numpy().astype(float)


def synthetic(clinics: list[int], seed: int) -> tuple[pl.DataFrame, np.ndarray]:
    """A joint region × clinic grid with `clinics[r]` clinics in region r; Poisson(20) truth."""
    region = np.repeat(np.arange(len(clinics)), clinics)
    grid = pl.DataFrame({"region": region, "clinic": np.arange(region.size)})
    return grid, np.random.default_rng(seed).poisson(20, region.size).astype(float)


def measure(source: NoiseSource, exact: np.ndarray, law: NoiseLaw) -> np.ndarray:
    return exact + discrete_laplace(law.scale, exact.size, source) * float(law.granularity)


def exact_ratios(levels: Levels, split: list[NoiseLaw]) -> dict[str, np.ndarray]:
    """Mean over each level's rows of Var(c)/Var(a) and Var(c)/Var(b): noise-free ratios."""
    ours = level_variances(levels, split)
    return {
        "a": np.array([np.mean(ours[k] / split[k].variance) for k in range(3)]),
        "b": np.array(
            [
                np.mean(ours[k] / (np.bincount(levels.index[k]) * split[0].variance))
                for k in range(3)
            ]
        ),
    }


def run(
    grid: pl.DataFrame, truth: np.ndarray, delta: int, epsilon: Fraction, releases: int, seed: int
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """MAE per method and level (index 1 = region, 2 = total) over `releases` releases, and
    the exact variance ratios."""
    levels = Levels.build(grid, [["region"], []])
    exact = levels.aggregate(truth)
    split = [NoiseLaw(delta / share) for share in split_epsilon(epsilon, 3)]
    full = NoiseLaw(delta / epsilon)
    source = NoiseSource.seeded_for_tests(seed)
    err = {m: np.zeros(3) for m in METHODS}
    for _ in range(releases):
        ys = [measure(source, e, law) for e, law in zip(exact, split, strict=True)]
        alone_cells = measure(source, exact[0], full)
        estimate = consistent(levels, ys, split)
        by_method: dict[str, tuple[np.ndarray, ...]] = {
            "a": tuple(ys),
            "b": levels.aggregate(ys[0]),
            "c": estimate.values,
            "a_full": tuple(measure(source, e, full) for e in exact),
            "b_full": levels.aggregate(alone_cells),
        }
        if levels.n_cells <= _PLUS_MAX_CELLS:
            by_method["c_plus"] = round_additive(consistent_nonnegative(levels, ys, split)).values
        for method, values in by_method.items():
            for k in range(3):
                err[method][k] += np.abs(values[k] - exact[k]).mean()
    return {m: e / releases for m, e in err.items()}, exact_ratios(levels, split)


def timed(fn: Callable[[], object], repeats: int = 1) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def timings(grid: pl.DataFrame, truth: np.ndarray, epsilon: Fraction) -> list[tuple[str, float]]:
    laws = [NoiseLaw(1 / share) for share in split_epsilon(epsilon, 3)]
    levels = Levels.build(grid, [["region"], []])
    source = NoiseSource.seeded_for_tests(1)
    ys = [measure(source, e, law) for e, law in zip(levels.aggregate(truth), laws, strict=True)]
    estimate = consistent(levels, ys, laws)
    return [
        ("Levels.build (index the grid)", timed(lambda: Levels.build(grid, [["region"], []]), 3)),
        ("consistent (least-squares solve)", timed(lambda: consistent(levels, ys, laws), 5)),
        ("level_variances (exact)", timed(lambda: level_variances(levels, laws), 3)),
        ("moe95 (every value)", timed(lambda: moe95(levels, laws))),
        ("consistent_nonnegative", timed(lambda: consistent_nonnegative(levels, ys, laws))),
        ("round_additive", timed(lambda: round_additive(estimate))),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", type=int, default=200)
    parser.add_argument("--epsilon", type=Fraction, default=Fraction(1))
    args = parser.parse_args()
    big_clinics = np.random.default_rng(0).integers(50, 151, 100)
    big_clinics[-1] += 10_000 - big_clinics.sum()
    scenarios = [
        ("demo visits (32 cells, Δ=4)", *demo_visits(), 4),
        ("synthetic (8 regions, 2–6 clinics)", *synthetic([2, 3, 4, 5, 6, 2, 3, 6], 1), 1),
        ("synthetic (100 regions, 10⁴ cells)", *synthetic(list(big_clinics), 2), 1),
    ]
    print(
        f"MAE over {args.releases} releases (counts, total ε = {args.epsilon}, equal split); "
        "exact Var ratios are means over the level's rows\n"
    )
    print(
        "| hierarchy | level | (a) direct, ε/3 | (b) Σ cells, ε/3 | (c) consistent | c/a | c/b "
        "| exact Var c/a, c/b | (a′) direct, ε | (b′) Σ cells, ε | c/a′ | c/b′ "
        "| (c⁺) ≥0, integer |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for i, (name, grid, truth, delta) in enumerate(scenarios):
        mae, var = run(grid, truth, delta, args.epsilon, args.releases, seed=100 + i)
        for k, level in ((1, "region"), (2, "total")):
            a, b, c = mae["a"][k], mae["b"][k], mae["c"][k]
            af, bf = mae["a_full"][k], mae["b_full"][k]
            plus = f"{mae['c_plus'][k]:.2f}" if grid.height <= _PLUS_MAX_CELLS else "—"
            print(
                f"| {name} | {level} | {a:.2f} | {b:.2f} | {c:.2f} | {c / a:.2f} | {c / b:.2f} "
                f"| {var['a'][k]:.3f}, {var['b'][k]:.3f} | {af:.2f} | {bf:.2f} "
                f"| {c / af:.2f} | {c / bf:.2f} | {plus} |"
            )
    _, grid, truth, _ = scenarios[2]
    print(f"\nSolve times at {grid.height} cells (100 regions; best of repeats)\n")
    print("| step | seconds |\n|---|---:|")
    for step, seconds in timings(grid, truth, args.epsilon):
        print(f"| {step} | {seconds:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
