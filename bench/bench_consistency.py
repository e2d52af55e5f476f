"""Accuracy and speed of releases with margins, at the same total ε, through the
release path (`prepare(...).draw(...)`, what `dp.release` runs).

Counts released by region × clinic, on three hierarchies: the demo's visits (January 2024 of
`pipelines.demo_data.generate_visits`, the 32 clinics of pipelines/specs/public/clinics.csv,
privacy unit patient_id with at most 4 visits as in pipelines/specs/visits_monthly.yaml, so
Δ = 4; patients' visits beyond their first 4 of the month are dropped beforehand, so the
random contribution bound keeps every row and the truth is fixed), the issue's synthetic
hierarchy (8 regions of 2–6 clinics, Poisson(20) rows per clinic, each row a unit: Δ = 1) and a
10⁴-cell one (100 regions of 50–150 clinics). Over R releases, the mean absolute error of the
region totals and of the grand total from:

  (a)  a direct noisy measurement alone: a spec by region, and one without group_by, each
       at ε/3 (the three levels as separate specs today, at the same total ε);
  (b)  the sum of noisy cells alone: the cells' spec at ε/3, summed;
  (c)  the consistent estimate: one spec with margins [[region], []] at ε (ε/3 per level),
       postprocess.nonnegative: false (the linear, unbiased estimate; counts rounded
       additively to integers);
  (a′) the level released alone with the whole ε, (b′) the cells alone with the whole ε
       (the other levels are then not released);
  (c⁺) (c) with nonnegative: true (the default); not on the 10⁴-cell grid (slow).

Seeded noise (NoiseSource.seeded_for_tests, allow_unsafe_noise): a benchmark, never a
release. Besides the MAE ratios: the RMSE ratio c/a, the ratio of the published 95% margins of
error (the `n_moe95` columns of (c) and (a), mean over the level's rows: exact, noise-free) and
Var c/a, the exact ratio of the consistent estimate's variance to the level's own measurement's
(`level_variances`). (a) is one discrete Laplace draw, peaked and heavy-tailed, and
(c) a mix of many, closer to normal: at equal variance a Laplace error has the smaller mean
absolute value (√2/2 σ against 0.80 σ) but the wider 95% interval (2.12 σ against 1.96 σ).

    .venv/bin/python bench/bench_consistency.py                  # 200 releases
    .venv/bin/python bench/bench_consistency.py --releases 1000

Prints markdown tables: accuracy, then times at 10⁴ cells (the steps, and a whole release).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from dprelease.loss import split_by_weights
from dprelease.mechanism.margins._consistency import (
    consistent,
    consistent_nonnegative,
    level_variances,
)
from dprelease.mechanism.margins._moe import moe95
from dprelease.mechanism.margins._rounding import round_additive
from dprelease.mechanism.noise import NoiseLaw, NoiseSource, discrete_laplace
from dprelease.publish import PreparedRelease, decide_budget
from dprelease.publish import prepare as prepare_with
from dprelease.spec import LEVEL_COLUMN, Levels, ResolvedSpec, parse_spec

_PLUS_MAX_CELLS = 1000


def prepare(data: pl.DataFrame, resolved: ResolvedSpec, epsilon: Fraction) -> PreparedRelease:
    """The release path's preparation at a stated ε (no ledger)."""
    return prepare_with(data, resolved, decide_budget(resolved, epsilon=epsilon))


METHODS = ("a", "b", "c", "a_full", "b_full", "c_plus")


@dataclass(frozen=True)
class Scenario:
    name: str
    data: pl.DataFrame  # one row per counted row, with region and clinic
    keys: pl.DataFrame  # the joint region × clinic domain
    unit: dict[str, Any]  # the spec's privacy unit settings

    @property
    def delta(self) -> int:
        return int(self.unit.get("max_rows_per_unit", 1))


def demo_visits() -> Scenario:
    """January 2024 of the demo's visits in the public domain, each patient's first 4 (by
    date), so the release's contribution bound keeps every row."""
    from pipelines.demo_data import clinic_keys, generate_visits

    keys = clinic_keys()
    visits = generate_visits().filter(pl.col("visit_date").dt.month() == 1)
    in_domain = visits.join(keys, on=["region", "clinic"], how="semi")  # as a release drops
    kept = in_domain.filter(pl.int_range(pl.len()).over("patient_id") < 4)
    return Scenario(
        "demo visits (32 cells, Δ = 4)",
        kept.select("patient_id", "region", "clinic"),
        keys,
        {"privacy_unit": "patient_id", "max_rows_per_unit": 4},
    )


def synthetic(name: str, clinics: list[int], seed: int) -> Scenario:
    """Region r has clinics[r] clinics, each with Poisson(20) rows; each row is a unit."""
    region = np.repeat(np.arange(len(clinics)), clinics)
    keys = pl.DataFrame({"region": region, "clinic": np.arange(region.size)})
    counts = np.random.default_rng(seed).poisson(20, region.size)
    return Scenario(name, keys[np.repeat(np.arange(keys.height), counts)], keys, {})


def specs(scenario: Scenario, directory: Path) -> dict[str, Any]:
    """The release specs compared: cells, region, total, and cells with margins."""
    keys_file = directory / f"keys-{scenario.keys.height}.csv"
    scenario.keys.write_csv(keys_file)
    # the keys file beside the spec (here: `directory`), as a spec file has it
    joint = [{"columns": ["region", "clinic"], "domain": {"file": keys_file.name}}]
    regions = scenario.keys.get_column("region").unique(maintain_order=True).to_list()
    base = {
        "name": "b",
        "source": "b",
        **scenario.unit,
        "statistics": [{"name": "n", "kind": "count"}],
    }
    linear = {"nonnegative": False}
    return {
        "cells": parse_spec({**base, "group_by": joint, "postprocess": linear}, base_dir=directory),
        "region": parse_spec(
            {
                **base,
                "group_by": [{"column": "region", "domain": {"values": regions}}],
                "postprocess": linear,
            }
        ),
        "total": parse_spec({**base, "postprocess": linear}),
        "margins": parse_spec(
            {**base, "group_by": joint, "margins": [["region"], []], "postprocess": linear},
            base_dir=directory,
        ),
        "margins_nonnegative": parse_spec(
            {**base, "group_by": joint, "margins": [["region"], []]}, base_dir=directory
        ),
    }


@dataclass
class Errors:
    """Sums of absolute and squared errors per method at [_, region, total]."""

    absolute: dict[str, np.ndarray]
    squared: dict[str, np.ndarray]

    def add(self, method: str, region: np.ndarray, total: float) -> None:
        self.absolute[method] += [0, np.abs(region).mean(), abs(total)]
        self.squared[method] += [0, (region**2).mean(), total**2]


def region_errors(table: pl.DataFrame, truth: pl.DataFrame) -> np.ndarray:
    """Errors of the region totals in a table with a `region` column and `n`."""
    joined = truth.join(table.select("region", "n"), on="region", how="left")
    return (joined["n"] - joined["truth"]).to_numpy().astype(float)


def run(
    scenario: Scenario, epsilon: Fraction, releases: int, seed: int, directory: Path
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray]:
    """MAE and RMSE per method at [_, region, total] over `releases` releases, and the ratio of
    the published margins of error of (c) and (a) per level (mean over the level's rows)."""
    chosen = specs(scenario, directory)
    truth = scenario.data.group_by("region").agg(pl.len().cast(pl.Int64).alias("truth"))
    total = scenario.data.height
    third = epsilon / 3
    prepared: dict[str, PreparedRelease] = {
        "a_region": prepare(scenario.data, chosen["region"], third),
        "a_total": prepare(scenario.data, chosen["total"], third),
        "b": prepare(scenario.data, chosen["cells"], third),
        "c": prepare(scenario.data, chosen["margins"], epsilon),
        "a_full_region": prepare(scenario.data, chosen["region"], epsilon),
        "a_full_total": prepare(scenario.data, chosen["total"], epsilon),
        "b_full": prepare(scenario.data, chosen["cells"], epsilon),
    }
    if scenario.keys.height <= _PLUS_MAX_CELLS:
        prepared["c_plus"] = prepare(scenario.data, chosen["margins_nonnegative"], epsilon)
    source = NoiseSource.seeded_for_tests(seed)
    errors = Errors({m: np.zeros(3) for m in METHODS}, {m: np.zeros(3) for m in METHODS})
    for _ in range(releases):
        tables = {
            name: p.draw(source, allow_unsafe_noise=True).table for name, p in prepared.items()
        }
        for method in ("a", "a_full"):
            region, alone = tables[f"{method}_region"], tables[f"{method}_total"]
            errors.add(method, region_errors(region, truth), alone["n"][0] - total)
        for method in ("b", "b_full"):
            cells = tables[method]
            summed = cells.group_by("region").agg(pl.col("n").sum())
            errors.add(method, region_errors(summed, truth), float(cells["n"].sum()) - total)
        for method in ("c", "c_plus"):
            if method in tables:
                levels = tables[method].partition_by(LEVEL_COLUMN, as_dict=True)
                region, whole = levels[("region",)], levels[("total",)]
                errors.add(method, region_errors(region, truth), whole["n"][0] - total)
    margins = tables["c"].partition_by(LEVEL_COLUMN, as_dict=True)
    direct = {"region": tables["a_region"], "total": tables["a_total"]}
    margin_ratio = np.ones(3)
    for k, level in ((1, "region"), (2, "total")):
        ours = margins[(level,)].get_column("n_moe95").to_numpy().mean()
        margin_ratio[k] = ours / direct[level].get_column("n_moe95").to_numpy().mean()
    mae = {m: e / releases for m, e in errors.absolute.items()}
    rmse = {m: np.sqrt(e / releases) for m, e in errors.squared.items()}
    return mae, rmse, margin_ratio


def variance_ratio(scenario: Scenario, epsilon: Fraction) -> np.ndarray:
    """Mean over each level's rows of Var(c)/Var(a): exact, noise-free."""
    levels = Levels.build(scenario.keys, [["region"], []])
    laws = [
        NoiseLaw.laplace(scenario.delta / share)
        for share in split_by_weights(epsilon, [Fraction(1)] * 3)
    ]
    ours = level_variances(levels, laws)
    return np.array([np.mean(ours[k] / laws[k].variance) for k in range(3)])


def timed(fn: Callable[[], object], repeats: int = 1) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def timings(scenario: Scenario, epsilon: Fraction, directory: Path) -> list[tuple[str, float]]:
    """The steps at 10⁴ cells (module level), and a whole release through the release path."""
    grid = scenario.keys
    laws = [NoiseLaw.laplace(1 / share) for share in split_by_weights(epsilon, [Fraction(1)] * 3)]
    levels = Levels.build(grid, [["region"], []])
    truth = np.bincount(scenario.data["clinic"].to_numpy(), minlength=grid.height).astype(float)
    source = NoiseSource.seeded_for_tests(1)
    ys = [
        e + discrete_laplace(law.scale, e.size, source)
        for e, law in zip(levels.aggregate(truth), laws, strict=True)
    ]
    estimate = consistent(levels, ys, laws)
    loaded = specs(scenario, directory)["margins"]
    prepared = prepare(scenario.data, loaded, epsilon)
    return [
        ("Levels.build (index the grid)", timed(lambda: Levels.build(grid, [["region"], []]), 3)),
        ("consistent (least-squares solve)", timed(lambda: consistent(levels, ys, laws), 5)),
        ("level_variances (exact)", timed(lambda: level_variances(levels, laws), 3)),
        ("moe95 (every value)", timed(lambda: moe95(levels, laws))),
        ("consistent_nonnegative", timed(lambda: consistent_nonnegative(levels, ys, laws))),
        ("round_additive", timed(lambda: round_additive(estimate))),
        (
            "prepare() of a release (margins of error planned)",
            timed(lambda: prepare(scenario.data, loaded, epsilon)),
        ),
        (
            "draw() of a release (aggregate, noise, solve, round)",
            timed(lambda: prepared.draw(source, allow_unsafe_noise=True), 3),
        ),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", type=int, default=200)
    parser.add_argument("--epsilon", type=Fraction, default=Fraction(1))
    args = parser.parse_args()
    big_clinics = np.random.default_rng(0).integers(50, 151, 100)
    big_clinics[-1] += 10_000 - big_clinics.sum()
    scenarios = [
        demo_visits(),
        synthetic("synthetic (8 regions, 2–6 clinics)", [2, 3, 4, 5, 6, 2, 3, 6], 1),
        synthetic("synthetic (100 regions, 10⁴ cells)", list(big_clinics), 2),
    ]
    print(
        f"MAE over {args.releases} releases through the release path (counts, total ε = "
        f"{args.epsilon}, equal split over 3 levels; load average at start "
        f"{os.getloadavg()[0]:.1f})\n"
    )
    print(
        "| hierarchy | level | (a) direct, ε/3 | (b) Σ cells, ε/3 | (c) consistent "
        "| c/a MAE | c/a RMSE | c/a ±95% | Var c/a exact | c/b MAE "
        "| (a′) direct, ε | (b′) Σ cells, ε | c/a′ | c/b′ | (c⁺) ≥ 0 |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        for i, scenario in enumerate(scenarios):
            mae, rmse, margin = run(scenario, args.epsilon, args.releases, 100 + i, directory)
            var = variance_ratio(scenario, args.epsilon)
            for k, level in ((1, "region"), (2, "total")):
                a, b, c = mae["a"][k], mae["b"][k], mae["c"][k]
                af, bf = mae["a_full"][k], mae["b_full"][k]
                plus = f"{mae['c_plus'][k]:.2f}" if scenario.keys.height <= _PLUS_MAX_CELLS else "—"
                print(
                    f"| {scenario.name} | {level} | {a:.2f} | {b:.2f} | {c:.2f} | {c / a:.2f} "
                    f"| {rmse['c'][k] / rmse['a'][k]:.2f} | {margin[k]:.2f} | {var[k]:.3f} "
                    f"| {c / b:.2f} | {af:.2f} | {bf:.2f} | {c / af:.2f} | {c / bf:.2f} | {plus} |"
                )
        big = scenarios[2]
        print(
            f"\nTimes at {big.keys.height} cells (100 regions, margins [[region], []]; best of "
            f"repeats; load average {os.getloadavg()[0]:.1f})\n"
        )
        print("| step | seconds |\n|---|---:|")
        for step, seconds in timings(big, args.epsilon, directory):
            print(f"| {step} | {seconds:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
