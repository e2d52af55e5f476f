"""Issue 9, findings 1-6: each test reproduces a way the guarantee or the budget could be broken.

Every test here failed on the code before the fix. They use only the public path (`parse_spec`,
`dprelease.publish`: decide the budget, prepare, draw; the CLI) so they keep meaning the same
thing whatever the engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pytest
from helpers import draw_release as exact
from helpers import prepare_release
from typer.testing import CliRunner

from dprelease.cli import app
from dprelease.errors import SpecError
from dprelease.spec import parse_spec
from dprelease.statement import Manifest, manifest_problems

runner = CliRunner()


def spec(**overrides: object) -> dict:
    base: dict = {
        "name": "t",
        "source": "t",
        "privacy_unit": "pid",
        "max_rows_per_unit": 1,
        "group_by": [{"column": "region", "domain": {"values": ["n", "s"]}}],
        "statistics": [{"name": "n", "kind": "count"}],
    }
    base.update(overrides)
    # full precision: these tests check exact aggregates, not the default rounding
    base["postprocess"] = {"decimals": 12, **base.get("postprocess", {})}
    return {key: value for key, value in base.items() if value is not None}


def public(manifest: Manifest) -> dict[str, Any]:
    """A manifest without the fields that differ between any two runs."""
    return manifest.model_dump(mode="json", exclude={"created_at", "release_id"})


def cli_release(tmp_path: Path, spec_text: str, data: Path, *extra: str):
    (tmp_path / "spec.yaml").write_text(spec_text)
    return runner.invoke(
        app,
        [
            "release",
            "--spec",
            str(tmp_path / "spec.yaml"),
            "--data",
            str(data),
            "--epsilon",
            "1",
            "--cap",  # a new scope's cap: the refusals below must come first all the same
            "1",
            "--out",
            str(tmp_path / "out"),
            "--ledger",
            str(tmp_path / "ledger.sqlite"),
            *extra,
        ],
    )


def assert_refused_before_the_ledger(result, tmp_path: Path, words: str) -> None:
    assert result.exit_code == 2, result.output
    assert words in result.stderr and result.stderr.count("\n") == 1
    assert not (tmp_path / "ledger.sqlite").exists() and not (tmp_path / "out").exists()


# 1. Contribution bounds: Δ from exactly what the engine enforces; defaults say what they do.


def test_group_bounds_on_an_ungrouped_release_are_refused() -> None:
    """R=10, G=1, R_g=1 without group_by claimed Δ=1 while one unit moved the count by 10."""
    for bound in ("max_groups_per_unit", "max_rows_per_group"):
        with pytest.raises(SpecError) as info:
            parse_spec(spec(group_by=[], max_rows_per_unit=10, **{bound: 1}))
        assert info.value.path == f"release.{bound}"


def test_rows_per_unit_defaults_to_groups_times_rows_per_group() -> None:
    """Only G and R_g set: R is G·R_g (it silently stayed 1 before)."""
    loaded = parse_spec(spec(max_rows_per_unit=None, max_groups_per_unit=2, max_rows_per_group=2))
    df = pl.DataFrame({"pid": [1] * 6, "region": ["n", "n", "n", "s", "s", "s"]})
    result = exact(df, loaded)
    assert result.table.get_column("n").to_list() == [2, 2]
    assert result.manifest.contribution_bounds.max_rows_per_unit == 4
    count = result.manifest.statistics[0]
    assert count.kind == "count" and count.sensitivity_units == 4


def test_a_privacy_unit_without_a_row_bound_is_refused() -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(spec(max_rows_per_unit=None))
    assert info.value.path == "release.max_rows_per_unit"


# 2. Periods: refused for a spec without `period:`, always filtering otherwise; the manifest
#    states the composition and, for parallel periods, the weaker guarantee.


def test_a_period_for_a_spec_without_periods_is_refused(tmp_path: Path) -> None:
    df = pl.DataFrame({"pid": [1, 2], "region": ["n", "s"]})
    with pytest.raises(SpecError) as info:
        prepare_release(df, parse_spec(spec()), 1.0, period="2024-01")
    assert info.value.path == "period"
    df.write_parquet(tmp_path / "data.parquet")
    spec_text = (
        "release:\n  name: t\n  source: t\n  privacy_unit: pid\n  max_rows_per_unit: 1\n"
        "  statistics: [{name: n, kind: count}]\n"
    )
    result = cli_release(tmp_path, spec_text, tmp_path / "data.parquet", "--period", "x1")
    assert_refused_before_the_ledger(result, tmp_path, "period")


@pytest.mark.parametrize("composition", ["sequential", "parallel"])
def test_periods_filter_rows_and_the_manifest_states_the_guarantee(composition: str) -> None:
    loaded = parse_spec(spec(period={"column": "day", "composition": composition}))
    df = pl.DataFrame(
        {
            "pid": [1, 2, 3],
            "region": ["n", "n", "s"],
            "day": pl.Series(["2024-01-31", "2024-02-01", "2024-02-29"]).str.to_date(),
        }
    )
    result = exact(df, loaded, period="2024-02")
    assert result.table.get_column("n").to_list() == [1, 1]
    manifest = result.manifest
    assert manifest.period_composition == composition
    if composition == "parallel":
        assert "person within a period" in manifest.guarantee
    else:
        assert "one lifetime budget" in manifest.guarantee


# 3. Granularity and noise scale come from the spec and ε, never from data values or dtypes.


COST = {"name": "cost", "kind": "sum", "column": "cost", "lower": 0, "upper": 1000}


def test_one_csv_value_cannot_change_granularity_or_scale(tmp_path: Path) -> None:
    loaded = parse_spec(spec(statistics=[COST]))
    manifests = []
    for value in ("500", "500.5"):
        path = tmp_path / f"{value}.csv"
        path.write_text(f"pid,region,cost\n1,n,{value}\n2,s,7\n")
        manifests.append(public(exact(path, loaded).manifest))
    assert manifests[0] == manifests[1]


def test_a_nan_in_a_pandas_integer_column_changes_nothing_public() -> None:
    loaded = parse_spec(spec(statistics=[COST]))
    ints = pd.DataFrame({"pid": [1, 2], "region": ["n", "s"], "cost": [500, 7]})
    with_nan = ints.assign(cost=[np.nan, 7])  # pandas makes the column float
    assert public(exact(ints, loaded).manifest) == public(exact(with_nan, loaded).manifest)


def test_csv_text_that_does_not_parse_follows_the_nulls_rule(tmp_path: Path) -> None:
    stats = [{**COST, "lower": 10, "granularity": 1}]
    path = tmp_path / "in.csv"
    path.write_text("pid,region,cost\n1,n,n/a\n2,n,20\n3,s,2.0\n")
    table = exact(path, parse_spec(spec(statistics=stats))).table
    assert table.get_column("cost").to_list() == [30.0, 10.0]  # n/a → lower; 2.0 clamped to 10


# 4. Failures after the reservation: aggregation is total; the spec-level limits are refused
#    in prepare() (CLI: exit 2, nothing reserved).


def test_a_malformed_csv_cell_past_the_inference_window_is_just_a_null(tmp_path: Path) -> None:
    rows = ["pid,region,cost"] + [f"{i},n,1" for i in range(5000)] + ["9999,n,SECRET-4711"]
    path = tmp_path / "input.csv"
    path.write_text("\n".join(rows) + "\n")
    stats = [{**COST, "granularity": 1}]
    table = exact(path, parse_spec(spec(statistics=stats))).table
    assert table.get_column("cost").to_list() == [5000.0, 0.0]


def test_keys_that_do_not_fit_the_domain_dtype_are_dropped(tmp_path: Path) -> None:
    """-1 against a UInt8 keys file, 2^63 (UInt64) against an Int64 range: outside the domain."""
    pl.DataFrame({"code": pl.Series([1, 2], dtype=pl.UInt8)}).write_parquet(tmp_path / "k.parquet")
    by_file = parse_spec(
        spec(group_by=[{"column": "code", "domain": {"file": "k.parquet"}}]), base_dir=tmp_path
    )
    df = pl.DataFrame({"pid": [1, 2, 3], "code": [-1, 1, 2]})
    assert exact(df, by_file).table.get_column("n").to_list() == [1, 1]
    by_range = parse_spec(spec(group_by=[{"column": "code", "domain": {"min": 0, "max": 1}}]))
    df = pl.DataFrame({"pid": [1, 2], "code": pl.Series([2**63, 1], dtype=pl.UInt64)})
    assert exact(df, by_range).table.get_column("n").to_list() == [0, 1]


def test_sums_cannot_overflow_whatever_the_row_count() -> None:
    """46,117 rows at upper = 2e14 were refused after the reservation (int64 overflow check)."""
    rows = 46_117
    stats = [{**COST, "upper": 2e14, "granularity": 1}]
    df = pl.DataFrame({"pid": range(rows), "region": ["n"] * rows, "cost": [2e14] * rows})
    table = exact(df, parse_spec(spec(statistics=stats))).table
    assert table.get_column("cost").to_list() == [float(rows * 2 * 10**14), 0.0]


def test_huge_bounds_are_refused_at_validation(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(spec(statistics=[{**COST, "upper": 1e300}]))
    assert info.value.path == "release.statistics[0]"
    pl.DataFrame({"pid": [1], "region": ["n"], "cost": [1.0]}).write_parquet(tmp_path / "d.pq")
    spec_text = (
        "release:\n  name: t\n  source: t\n  privacy_unit: pid\n  max_rows_per_unit: 1\n"
        "  statistics: [{name: c, kind: sum, column: cost, lower: 0, upper: 1e300}]\n"
    )
    result = cli_release(tmp_path, spec_text, tmp_path / "d.pq")
    assert_refused_before_the_ledger(result, tmp_path, "release.statistics[0]")


def test_a_noise_scale_beyond_the_sampler_is_refused_naming_the_statistic() -> None:
    df = pl.DataFrame({"pid": [1], "region": ["n"]})
    with pytest.raises(SpecError) as info:
        prepare_release(df, parse_spec(spec(max_rows_per_unit=2**40)), 2**-20)
    assert info.value.path == "release.statistics[0]"


# 5. Rows with a null privacy unit are dropped, never merged into one shared allowance.


def test_rows_with_a_null_unit_are_dropped() -> None:
    df = pl.DataFrame({"pid": [None, None, None, 7], "region": ["n", "s", "s", "s"]})
    loaded = parse_spec(spec(max_rows_per_unit=3))
    assert exact(df, loaded).table.get_column("n").to_list() == [0, 1]
    floats = pl.DataFrame({"pid": [float("nan"), 7.0], "region": ["n", "s"]})
    assert exact(floats, loaded).table.get_column("n").to_list() == [0, 1]


# 6. Internal names never collide with names a spec gives.


def test_a_statistic_named_like_a_means_internals_gets_its_own_values() -> None:
    stats = [
        {"name": "n", "kind": "count"},
        {"name": "x", "kind": "mean", "column": "a", "lower": 0, "upper": 10, "granularity": 1},
        {"name": "x__sum", "kind": "sum", "column": "b", "lower": 0, "upper": 100},
    ]
    loaded = parse_spec(spec(statistics=stats, postprocess={"nonnegative": False}))
    df = pl.DataFrame({"pid": [1, 2], "region": ["n", "n"], "a": [2.0, 4.0], "b": [50.0, 25.0]})
    result = exact(df, loaded)
    assert result.table.select("n", "x", "x__sum").row(0) == (2, 3.0, 75.0)
    assert manifest_problems({**result.manifest.to_json_dict(), "release_id": "t"}) == [
        "noise source is seeded: not a private release"
    ]


@pytest.mark.parametrize(
    ("names", "words"),
    [(["mean:x:sum"], "should match pattern"), (["n", "n_moe95"], "'n_moe95'")],
)
def test_names_that_could_collide_are_refused(names: list[str], words: str) -> None:
    stats = [{"name": name, "kind": "count"} for name in names]
    with pytest.raises(SpecError, match=words):
        parse_spec(spec(statistics=stats))
