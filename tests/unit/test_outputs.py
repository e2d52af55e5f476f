"""What a statistician reads: margin-of-error columns, rounding to the precision the noise
leaves, and means that are null (and flagged) where no mean is defined."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from helpers import draw_release, make_spec
from typer.testing import CliRunner

from dprelease.cli import app
from dprelease.mechanism import noise_decimals
from dprelease.mechanism.noise import NoiseSource
from dprelease.publish import Release
from dprelease.spec import ResolvedSpec

BASE: dict[str, Any] = {
    "name": "t",
    "source": "t",
    "privacy_unit": "pid",
    "max_rows_per_unit": 1,
    "group_by": [{"column": "g", "domain": {"values": ["a", "b", "c"]}}],
}


def spec(*statistics: dict, postprocess: dict | None = None) -> ResolvedSpec:
    return make_spec(BASE, statistics=list(statistics), postprocess=postprocess or {})


def run(
    loaded: ResolvedSpec, df: pl.DataFrame, epsilon: float = 1.0, noise: NoiseSource | None = None
) -> Release:
    """A release with test noise (zero unless given)."""
    return draw_release(df, loaded, epsilon, noise=noise)


COST = {"name": "cost", "kind": "sum", "column": "x", "lower": 0, "upper": 1000}
DATA = pl.DataFrame({"pid": [1, 2, 3], "g": ["a", "a", "b"], "x": [123.4, 250.0, 37.06]})


@pytest.mark.parametrize(
    ("moe", "decimals"),
    [(2995.7, -2), (1000.0, -2), (999.9, -1), (9.6, 1), (10.0, 0), (0.0456, 3), (0.0, None)],
)
def test_the_rounding_place_is_the_second_significant_digit_of_the_margin(
    moe: float, decimals: int | None
) -> None:
    assert noise_decimals(moe) == decimals


def test_sums_are_rounded_to_the_precision_the_noise_leaves_and_margins_up() -> None:
    result = run(spec(COST), DATA)
    entry = result.manifest.statistics[0]
    assert entry.kind == "sum"
    assert entry.moe95 == pytest.approx(2995.7, abs=0.1) and entry.decimals == -2
    assert result.table.get_column("cost").to_list() == [400.0, 0.0, 0.0]  # 373.4 → 400
    assert result.table.get_column("cost_moe95").to_list() == [3000.0] * 3  # never understated
    assert "second significant digit" in result.manifest.postprocessing.rounding
    noisy = run(spec(COST), DATA, noise=NoiseSource.seeded_for_tests(7)).table
    assert all(value % 100 == 0 for value in noisy.get_column("cost"))


def test_decimals_overrides_the_rounding() -> None:
    result = run(spec(COST, postprocess={"decimals": 1}), DATA)
    entry = result.manifest.statistics[0]
    assert entry.kind == "sum" and entry.decimals == 1
    assert result.table.get_column("cost").to_list() == [373.4, 37.1, 0.0]
    moe = entry.moe95
    assert result.table.get_column("cost_moe95").item(0) == math.ceil(moe * 10) / 10 >= moe


def test_a_mean_whose_noisy_count_is_not_positive_is_null_and_flagged() -> None:
    stats = [
        {"name": "n", "kind": "count"},
        {"name": "avg", "kind": "mean", "column": "x", "lower": 0, "upper": 20},
    ]
    df = pl.DataFrame({"pid": [1, 2], "g": ["a", "a"], "x": [10.0, 13.0]})
    result = run(spec(*stats, postprocess={"decimals": 2}), df)
    table = result.table  # zero noise: counts 2, 0, 0
    assert table.get_column("avg").to_list() == [11.5, None, None]
    assert table.get_column("avg_undefined").to_list() == [False, True, True]
    assert table.get_column("avg_moe95").null_count() == 2
    mean_entry = result.manifest.statistics[1]
    assert mean_entry.kind == "mean"
    assert "null where the noisy count is ≤ 0" in mean_entry.undefined


def test_a_mean_is_rounded_per_cell_by_its_own_margin() -> None:
    stats = [
        {"name": "n", "kind": "count"},
        {"name": "avg", "kind": "mean", "column": "x", "lower": 0, "upper": 20},
    ]
    rows = 2000
    df = pl.DataFrame({"pid": range(rows), "g": ["a"] * rows, "x": [12.345678] * rows})
    result = run(spec(*stats), df, epsilon=4.0)
    count, avg = result.manifest.statistics
    assert count.kind == "count" and avg.kind == "mean"
    mean, moe = result.table.select("avg", "avg_moe95").row(0)
    exact_moe = (avg.measurements[0].moe95 + 12.345678 * count.moe95) / rows
    places = 1 - math.floor(math.log10(exact_moe))
    assert places >= 2  # more digits than the sums' rule would keep for the bounds alone
    assert mean == round(12.345678, places)
    assert moe == math.ceil(exact_moe * 10**places) / 10**places >= exact_moe


def test_the_cli_preview_shows_values_and_leaves_margins_and_flags_to_the_files(
    tmp_path: Path,
) -> None:
    means = spec(
        {"name": "n", "kind": "count"},
        {"name": "avg", "kind": "mean", "column": "x", "lower": 0, "upper": 20},
    ).spec
    (tmp_path / "spec.yaml").write_text(means.to_yaml())
    DATA.write_parquet(tmp_path / "data.parquet")
    args = ["release", "--spec", str(tmp_path / "spec.yaml"), "--data"]
    args += [str(tmp_path / "data.parquet"), "--out", str(tmp_path / "out"), "--epsilon", "1"]
    result = CliRunner().invoke(app, [*args, "--cap", "1", "--ledger", str(tmp_path / "l")])
    assert result.exit_code == 0, result.output
    assert "avg" in result.stdout and "_moe95" not in result.stdout
    assert "_undefined" not in result.stdout
    header = (tmp_path / "out" / "release.csv").read_text().splitlines()[0]
    assert header == "g,n,n_moe95,avg,avg_moe95,avg_undefined,avg_uninformative"
