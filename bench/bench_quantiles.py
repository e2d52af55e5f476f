"""Accuracy of dprelease's quantiles against OpenDP's, on the same data and ε; and their cost.

Data: (i) real public microdata shipped inside scikit-learn's wheel, the diabetes study's raw
body mass index (442 patients; `load_diabetes(scaled=False)`, nothing downloaded; OpenDP's
polars extra installs scikit-learn in the benchmark env), and (ii) a
synthetic skewed income column, log-normal (median 30,000, σ = 0.8), 2,000 rows. Both sides get
the same grid: OpenDP's candidates are dprelease's grid points, so both answer in the same
units at the same resolution. Each privacy unit is one row (add/remove neighbours). Both get
the same total ε: OpenDP splits it evenly over the p's; dprelease spends a tenth of it on the
95% intervals it publishes (OpenDP publishes none) and releases the quartiles level by level.

OpenDP (`make_private_quantile`, permute-and-flip over the candidates, its scale set by
binary search to the ε of one p) lives only in the benchmark env and runs in a child process of
it, which also loads the scikit-learn data:

    bash bench/setup.sh
    .venv/bin/python bench/bench_quantiles.py                 # ~15 minutes
    .venv/bin/python bench/bench_quantiles.py --releases 50   # quick look
    .venv/bin/python bench/bench_quantiles.py --design 300    # the two candidate designs

Prints markdown tables (median and mean absolute error over the releases, in the column's
units; the cost of 10^4 cells × 1,000 grid points against the sampling floor) and writes them
to bench/results/quantiles.md (`--design`: bench/results/quantiles_design.md).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "quantiles.md"
BENCH_PYTHON = ROOT / ".venv-bench" / "bin" / "python"
EPSILONS = ["1/10", "1/4", "1/2", "1", "2"]
CASES = {"median": ["1/2"], "quartiles": ["1/4", "1/2", "3/4"]}
# name: (lower, upper, resolution)
GRIDS = {"diabetes bmi": ("15", "45", "1/10"), "log-normal income": ("0", "200000", "200")}


# --------------------------------------------------------------------------- bench-env child


def child_data() -> dict[str, list[float]]:
    """The two columns: scikit-learn's bundled diabetes BMI, and a seeded log-normal income."""
    from sklearn.datasets import load_diabetes

    bmi = load_diabetes(scaled=False).data[:, 2]
    income = np.random.default_rng(2024).lognormal(np.log(30_000), 0.8, 2_000)
    return {"diabetes bmi": bmi.tolist(), "log-normal income": income.tolist()}


def child_opendp(request: dict) -> dict:
    """OpenDP's released values: {dataset: {case: {ε: [[value per p] per release]}}}."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    domain = dp.vector_domain(dp.atom_domain(T=float, nan=False))
    metric = dp.symmetric_distance()
    out: dict = {}
    for name, column in request["data"].items():
        candidates = request["candidates"][name]
        out[name] = {}
        for case in request["cases"]:
            ps = CASES[case]
            out[name][case] = {}
            for eps in EPSILONS:
                per_p = float(Fraction(eps)) / len(ps)

                def quantile(alpha: float, candidates: list = candidates):
                    return lambda scale: dp.m.make_private_quantile(
                        domain, metric, dp.max_divergence(), candidates, alpha, scale
                    )

                measurements = [
                    dp.binary_search_chain(quantile(float(Fraction(p))), d_in=1, d_out=per_p)
                    for p in ps
                ]
                out[name][case][eps] = [
                    [m(column) for m in measurements] for _ in range(request["releases"])
                ]
    return out


# --------------------------------------------------------------------------- dprelease side


def ours(
    column: np.ndarray,
    grid_spec: tuple[str, str, str],
    ps: list[str],
    eps: str,
    releases: int,
    interval_share: Fraction,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`releases` independent releases (each its own cell), values and intervals in units."""
    from dprelease.change import ProtectedChange
    from dprelease.mechanism.quantiles import QuantileGrid, plan_quantiles, release_quantiles

    grid = QuantileGrid.from_bounds(*(Fraction(x) for x in grid_spec))
    hist = np.bincount(grid.discretize(column), minlength=grid.bins)
    plan = plan_quantiles(
        ps, Fraction(eps), grid.bins, 1, ProtectedChange.ADD_REMOVE, interval_share=interval_share
    )
    release = release_quantiles(np.tile(hist, (releases, 1)), plan)
    return grid.values(release.values), grid.values(release.low), grid.values(release.high)


def true_quantiles(column: np.ndarray, ps: list[str]) -> np.ndarray:
    """Rank ⌈p·n⌉ of the data (the inverse empirical CDF), the target of both mechanisms."""
    ordered = np.sort(column)
    n = ordered.size
    return np.array(
        [ordered[max(1, -(-Fraction(p).numerator * n // Fraction(p).denominator)) - 1] for p in ps]
    )


def cost(cells: int, bins: int, repeats: int) -> list[str]:
    """Seconds to release 1 and 3 quantiles of `cells` × `bins`, against the floor: drawing the
    exact discrete Laplace variates the values need (one per grid point per p). Interleaved."""
    from dprelease.change import ProtectedChange
    from dprelease.mechanism.noise import default_noise_source, discrete_laplace
    from dprelease.mechanism.quantiles import plan_quantiles, release_quantiles

    rng = np.random.default_rng(0)
    hist = rng.poisson(0.5, (cells, bins)).astype(np.int64)
    source = default_noise_source()
    rows = []
    for case, ps in CASES.items():
        plan = plan_quantiles(ps, Fraction(1), bins, 1, ProtectedChange.ADD_REMOVE)
        ours_s, floor_s = [], []
        for _ in range(repeats):
            start = time.perf_counter()
            release_quantiles(hist, plan, source)
            ours_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            for scale in plan.value_scales:
                discrete_laplace(scale, cells * bins, source)
            floor_s.append(time.perf_counter() - start)
        ratios = [a / b for a, b in zip(ours_s, floor_s, strict=True)]
        rows.append(
            f"| {case} ({len(ps)} p) | {np.median(ours_s):.2f} s "
            f"({min(ours_s):.2f}–{max(ours_s):.2f}) | {np.median(floor_s):.2f} s | "
            f"{np.median(ratios):.2f}× ({min(ratios):.2f}–{max(ratios):.2f}) |"
        )
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def tree_quantiles(
    hist: np.ndarray, ps: list[str], eps: Fraction, branching: int = 16
) -> np.ndarray:
    """The alternative design: every p read from one noisy hierarchical histogram.

    A complete `branching`-ary tree over the grid (padded with empty points), every level
    measured with exact discrete Laplace noise at scale levels/ε (one row moves each level by
    1), made consistent by least squares (Hay, Rastogi, Miklau & Suciu 2010, two passes), and
    each quantile read as the first grid point whose noisy cumulative count reaches p·ñ.
    """
    from dprelease.mechanism.noise import default_noise_source, discrete_laplace

    cells, bins = hist.shape
    depth = max(1, math.ceil(math.log(bins, branching)))
    leaves = np.zeros((cells, branching**depth))
    leaves[:, :bins] = hist
    levels = [leaves]
    while levels[-1].shape[1] > 1:
        levels.append(levels[-1].reshape(cells, -1, branching).sum(axis=2))
    levels = levels[::-1]  # root first
    scale = Fraction(len(levels)) / eps
    source = default_noise_source()
    noisy = [lv + discrete_laplace(scale, lv.size, source).reshape(lv.shape) for lv in levels]
    up = [np.empty(0)] * len(levels)  # pass 1: leaves up
    up[-1] = noisy[-1]
    for i in range(len(levels) - 2, -1, -1):
        height = len(levels) - i
        own = (branching**height - branching ** (height - 1)) / (branching**height - 1)
        up[i] = own * noisy[i] + (1 - own) * up[i + 1].reshape(cells, -1, branching).sum(axis=2)
    est = up[0]
    for i in range(1, len(levels)):  # pass 2: root down
        children = up[i].reshape(cells, -1, branching)
        est = (children + ((est - children.sum(axis=2)) / branching)[:, :, None]).reshape(cells, -1)
    cumulative = np.cumsum(est[:, :bins], axis=1)
    total = up[0][:, :1]
    out = np.empty((cells, len(ps)), dtype=np.int64)
    for i, p in enumerate(ps):
        reached = cumulative >= float(Fraction(p)) * total
        out[:, i] = np.where(reached.any(axis=1), reached.argmax(axis=1), bins - 1)
    return out


def design_comparison(cells: int) -> list[str]:
    """Grid steps of error, permute-and-flip (this module) against the hierarchical histogram,
    on log-normal cells of n rows over 1,000 grid points; and the seconds each takes."""
    from dprelease.change import ProtectedChange
    from dprelease.mechanism.noise import default_noise_source
    from dprelease.mechanism.quantiles import plan_quantiles, release_quantiles

    rng = np.random.default_rng(7)
    bins = 1000
    rows = [
        "| n | ε | p's | p | permute-and-flip | hierarchical histogram | time: PF / tree |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n in (100, 1_000, 10_000):
        points = np.clip((rng.lognormal(0, 1, (cells, n)) * bins / 10).round(), 0, bins - 1)
        hist = np.stack([np.bincount(c.astype(np.int64), minlength=bins) for c in points])
        upto = np.cumsum(hist, axis=1)
        for eps in (Fraction(1, 10), Fraction(1, 2), Fraction(1), Fraction(2)):
            for ps in (["1/2"], ["1/4", "1/2", "3/4"]):
                plan = plan_quantiles(ps, eps, bins, 1, ProtectedChange.ADD_REMOVE)
                start = time.perf_counter()
                ours_values = release_quantiles(hist, plan, default_noise_source()).values
                ours_s = time.perf_counter() - start
                start = time.perf_counter()
                tree_values = tree_quantiles(hist, ps, eps)
                tree_s = time.perf_counter() - start
                for i, p in enumerate(ps):
                    f = Fraction(p)
                    truth = np.argmax(upto * f.denominator >= f.numerator * upto[:, -1:], axis=1)
                    pf = np.mean(np.abs(ours_values[:, i] - truth))
                    tree = np.mean(np.abs(tree_values[:, i] - truth))
                    rows.append(
                        f"| {n:,} | {eps} | {len(ps)} | {p} | {pf:.1f} | {tree:.1f} | "
                        f"{ours_s:.2f} s / {tree_s:.2f} s |"
                    )
                    print(rows[-1], file=sys.stderr, flush=True)
    return rows


def main() -> int:
    if sys.argv[1:2] == ["--child-data"]:
        print(json.dumps(child_data()))
        return 0
    if sys.argv[1:2] == ["--child-opendp"]:
        from importlib.metadata import version

        result = child_opendp(json.loads(sys.stdin.read()))
        print(json.dumps({"version": version("opendp"), "values": result}))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", type=int, default=300)
    parser.add_argument("--cost-cells", type=int, default=10_000)
    parser.add_argument("--cost-bins", type=int, default=1000)
    parser.add_argument("--cost-repeats", type=int, default=3)
    parser.add_argument("--bench-python", type=Path, default=BENCH_PYTHON)
    parser.add_argument("--interval-share", type=Fraction, default=None)
    parser.add_argument("--skip-cost", action="store_true")
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--datasets", nargs="+", choices=list(GRIDS), default=list(GRIDS))
    parser.add_argument(
        "--design",
        type=int,
        metavar="CELLS",
        help="instead: compare the two candidate designs on CELLS log-normal cells per setting",
    )
    args = parser.parse_args()
    if args.design:
        table = "\n".join(
            [
                "# Quantiles: permute-and-flip against a hierarchical histogram",
                "",
                f"Mean absolute error in grid steps over {args.design} cells per setting "
                "(each cell its own log-normal sample of n rows on 1,000 grid points); both at "
                "the same total ε, which the histogram spends on every p at once. Seconds for "
                "all cells of a setting.",
                "",
                *design_comparison(args.design),
            ]
        )
        print(table)
        (RESULTS.parent / "quantiles_design.md").write_text(table + "\n")
        return 0
    from dprelease.mechanism.kinds.quantile import interval_share

    def share_of(ps: list[str]) -> Fraction:
        """The release path's interval share for these p's, unless --interval-share sets one."""
        return args.interval_share or interval_share(len(ps))

    def child(flag: str, stdin: str = "") -> dict:
        done = subprocess.run(
            [str(args.bench_python), __file__, flag],
            input=stdin,
            check=True,
            capture_output=True,
            text=True,
        )
        return json.loads(done.stdout)

    from dprelease.mechanism.quantiles import QuantileGrid

    data = {
        name: np.asarray(col)
        for name, col in child("--child-data").items()
        if name in args.datasets
    }
    candidates = {
        name: QuantileGrid.from_bounds(*(Fraction(x) for x in GRIDS[name]))
        .values(np.arange(QuantileGrid.from_bounds(*(Fraction(x) for x in GRIDS[name])).bins))
        .tolist()
        for name in GRIDS
    }
    request = {
        "data": {k: v.tolist() for k, v in data.items()},
        "candidates": candidates,
        "releases": args.releases,
        "cases": args.cases,
    }
    theirs = child("--child-opendp", json.dumps(request))
    lines = [
        "# Quantiles: dprelease against OpenDP",
        "",
        f"Absolute error over {args.releases} releases per setting, in the column's units, median "
        f"and mean (OpenDP {theirs['version']}, `make_private_quantile`; same grid, same total "
        f"ε; dprelease spends "
        + ", ".join(f"{share_of(CASES[c])} of it on the intervals of the {c}" for c in args.cases)
        + "). 'width' is the median width of "
        "dprelease's 95% intervals, 'covered' the share of them that hold the true quantile. "
        "A median error sits on the grid's steps, so where a mechanism picks the right point "
        "about half the time it jumps by a whole step between runs; the mean does not, but "
        "rare far misses make it noisy: '±' is the standard error of the difference of the "
        "two means.",
        "",
        "| data (n) | case | ε | p | median: dprelease | OpenDP | mean: dprelease | OpenDP "
        "| ± (s.e. of the difference) | width | covered |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    worse: list[str] = []
    within_noise: list[str] = []
    for name, column in data.items():
        for case in args.cases:
            ps = CASES[case]
            truth = true_quantiles(column, ps)
            for eps in EPSILONS:
                values, low, high = ours(column, GRIDS[name], ps, eps, args.releases, share_of(ps))
                other = np.asarray(theirs["values"][name][case][eps])
                for i, p in enumerate(ps):
                    # rounded to 1e-9 units: the grid's float arithmetic, not an error
                    mine_err = np.abs(values[:, i] - truth[i])
                    them_err = np.abs(other[:, i] - truth[i])
                    mine, them = (round(float(np.median(e)), 9) for e in (mine_err, them_err))
                    mine_mean, them_mean = (float(np.mean(e)) for e in (mine_err, them_err))
                    # standard error of the difference of the two means
                    noise = math.sqrt((mine_err.var() + them_err.var()) / args.releases)
                    covered = float(np.mean((low[:, i] <= truth[i]) & (truth[i] <= high[:, i])))
                    width = float(np.median(high[:, i] - low[:, i]))
                    setting = f"{name} {case} ε={eps} p={p}"
                    if mine > them:
                        worse.append(f"{setting} (median)")
                    if mine_mean > them_mean + 2 * noise:
                        worse.append(f"{setting} (mean, by more than 2 standard errors)")
                    elif mine_mean > them_mean:
                        within_noise.append(setting)
                    lines.append(
                        f"| {name} ({column.size}) | {case} | {eps} | {p} | {mine:,.4g} | "
                        f"{them:,.4g} | {mine_mean:,.4g} | {them_mean:,.4g} | {noise:,.2g} | "
                        f"{width:,.4g} | {covered:.3f} |"
                    )
                    print(lines[-1], file=sys.stderr, flush=True)
    lines += [
        "",
        f"Where dprelease's error is larger: {len(worse)} of "
        f"{2 * sum(len(CASES[c]) for c in args.cases) * len(EPSILONS) * len(data)} comparisons"
        + (": " + "; ".join(worse) if worse else "")
        + (
            f". Larger mean error but within 2 standard errors: {'; '.join(within_noise)}"
            if within_noise
            else ""
        ),
        "",
        f"## Cost: {args.cost_cells:,} cells × {args.cost_bins} grid points, OS CSPRNG",
        "",
        "Median (range) of interleaved repeats; the floor draws the exact discrete Laplace "
        "variates the values need (one per grid point per p) and nothing else.",
        "",
        "| release | dprelease | floor | ratio |",
        "| --- | ---: | ---: | ---: |",
    ]
    if not args.skip_cost:
        lines += cost(args.cost_cells, args.cost_bins, args.cost_repeats)
    load = os.getloadavg()
    lines += [
        "",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; load average at the end {load[0]:.1f}.",
    ]
    table = "\n".join(lines) + "\n"
    print(table)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
