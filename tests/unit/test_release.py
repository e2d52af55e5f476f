"""The pure release: exact pre-noise aggregates, the full key grid, noise statistics, no leaks."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pytest
from helpers import allocation_of, draw_release, make_spec, prepare_release
from helpers import exact_table as exact

import dprelease as dp
from dprelease.change import ProtectedChange
from dprelease.errors import DataError, SchemaError, SpecError, UnsafeNoiseSourceError
from dprelease.mechanism.noise import NoiseSource, laplace_variance
from dprelease.publish import decide_budget, prepare
from dprelease.spec import ResolvedSpec, parse_spec


def spec_of(**overrides: Any) -> ResolvedSpec:
    """The shared BASE_SPEC at full precision: these tests check exact aggregates, not the
    default rounding."""
    overrides["postprocess"] = {"decimals": 12, **overrides.get("postprocess", {})}
    return make_spec(**overrides)


def test_exact_counts_sums_clamping_nulls_and_domain() -> None:
    df = pl.DataFrame(
        {
            "pid": [1, 2, 3, 4, 5, 6, 7],
            "region": ["n", "n", "s", "s", "x", None, "s"],
            "cost": [10.0, 250.0, None, -5.0, 1.0, 1.0, float("inf")],
        }
    )
    table = exact(df, spec_of())
    assert table.columns == ["region", "n", "n_moe95", "cost", "cost_moe95"]
    # n: 10 + 100 (clamped); s: null → 0, -5 → 0, inf → 100; e: no rows; x and null dropped.
    assert table.select("region", "n", "cost").rows() == [
        ("n", 2, 110.0),
        ("s", 3, 100.0),
        ("e", 0, 0.0),
    ]


def test_null_counts_as_lower_when_zero_is_outside_the_bounds() -> None:
    df = pl.DataFrame({"pid": [1, 2], "region": ["n", "n"], "cost": [None, float("nan")]})
    loaded = spec_of(
        statistics=[{"name": "c", "kind": "sum", "column": "cost", "lower": 10, "upper": 20}]
    )
    assert exact(df, loaded).get_column("c").to_list() == [20.0, 0.0, 0.0]


def test_contributions_are_bounded_by_a_random_choice_of_rows() -> None:
    """Unit 1 has five rows in one group; only two survive, and which two varies between runs."""
    df = pl.DataFrame(
        {"pid": [1] * 5 + [2], "region": ["n"] * 6, "cost": [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]}
    )
    loaded = spec_of()
    sums = set()
    for _ in range(40):
        table = exact(df, loaded)
        assert table.get_column("n").to_list() == [3, 0, 0]
        sums.add(table.get_column("cost").item(0) - 32.0)
    possible = {a + b for i, a in enumerate([1, 2, 4, 8, 16]) for b in [1, 2, 4, 8, 16][i + 1 :]}
    assert sums <= possible
    assert len(sums) >= 4  # not first-k by file order; false alarm: C(10,3)·0.3^40 ≈ 1.5e-19


def test_max_groups_and_rows_per_group_bound_rows_and_default_the_unit_total() -> None:
    df = pl.DataFrame(
        {"pid": [1, 1, 1, 1, 1, 1], "region": ["n", "n", "n", "s", "s", "e"], "cost": [1.0] * 6}
    )
    loaded = spec_of(max_rows_per_unit=None, max_groups_per_unit=2, max_rows_per_group=1)
    for _ in range(10):
        counts = exact(df, loaded).get_column("n").to_list()
        assert sum(counts) == 2 and max(counts) == 1
    count = allocation_of(loaded, 1, ProtectedChange.ADD_REMOVE).measurements[0]
    assert count.sensitivity_units == 2  # R defaults to 2 groups × 1 row
    assert "defaults to 2 group(s) × 1 row(s) per group" in count.derivation
    tighter = spec_of(max_rows_per_unit=1, max_groups_per_unit=2, max_rows_per_group=1)
    assert sum(exact(df, tighter).get_column("n")) == 1
    assert (
        allocation_of(tighter, 1, ProtectedChange.ADD_REMOVE).measurements[0].sensitivity_units == 1
    )


def test_full_key_grid_with_empty_groups_and_range_domains() -> None:
    df = pl.DataFrame({"pid": [1], "region": ["n"], "age": [3], "cost": [1.0]})
    loaded = spec_of(
        group_by=[
            {"column": "region", "domain": {"values": ["n", "s"]}},
            {"column": "age", "domain": {"min": 1, "max": 3}},
        ]
    )
    table = exact(df, loaded)
    assert table.height == 6
    assert table.filter(pl.col("n") > 0).select("region", "age").rows() == [("n", 3)]


def test_joint_domain_drops_impossible_combinations(tmp_path) -> None:
    pl.DataFrame({"region": ["n", "s"], "clinic": ["n1", "s1"]}).write_csv(tmp_path / "keys.csv")
    df = pl.DataFrame(
        {
            "pid": [1, 2, 3],
            "region": ["n", "n", "s"],
            "clinic": ["n1", "s1", "s1"],
            "cost": [1.0, 2.0, 4.0],
        }
    )
    spec = {
        "name": "t",
        "source": "t",
        "privacy_unit": "pid",
        "max_rows_per_unit": 1,
        "group_by": [{"columns": ["region", "clinic"], "domain": {"file": "keys.csv"}}],
        "statistics": [{"name": "n", "kind": "count"}],
    }
    table = exact(df, parse_spec(spec, base_dir=tmp_path))
    assert table.select("region", "clinic", "n").rows() == [("n", "n1", 1), ("s", "s1", 1)]


def test_ungrouped_release_is_one_row() -> None:
    df = pl.DataFrame({"pid": [1, 2], "cost": [3.0, 4.0]})
    table = exact(df, spec_of(group_by=[]))
    assert table.select("n", "cost").rows() == [(2, 7.0)]


def test_every_input_kind_gives_the_same_aggregates_and_the_same_manifest(tmp_path) -> None:
    """Polars, lazy, pandas, arrow, parquet and CSV (all text): the same exact aggregates, and
    a manifest that does not depend on the input kind or its declared dtypes."""
    df = pl.DataFrame({"pid": [1, 2, 3], "region": ["n", "s", "s"], "cost": [1.5, 2.0, 3.0]})
    df.write_parquet(tmp_path / "t.parquet")
    df.write_csv(tmp_path / "t.csv")
    sources = {
        "polars": df,
        "lazy": df.lazy(),
        "pandas": df.to_pandas(),
        "arrow": df.to_arrow(),
        "parquet": tmp_path / "t.parquet",
        "csv": tmp_path / "t.csv",
    }
    manifests = []
    for kind, source in sources.items():
        result = draw_release(source, spec_of(), 1.0)
        assert result.table.select("n", "cost").rows() == [(1, 1.5), (2, 5.0), (0, 0.0)], kind
        manifests.append(result.manifest.to_json_dict())
        manifests[-1].pop("created_at")
    assert all(manifest == manifests[0] for manifest in manifests)


def test_mean_is_noisy_sum_over_noisy_count_and_reuses_the_count() -> None:
    df = pl.DataFrame({"pid": [1, 2, 3], "region": ["n", "n", "s"], "cost": [10.0, 30.0, 7.0]})
    stats = [
        {"name": "n", "kind": "count"},
        {"name": "avg", "kind": "mean", "column": "cost", "lower": 0, "upper": 100},
    ]
    result = draw_release(df, spec_of(statistics=stats), 1.0)
    assert result.table.get_column("avg").to_list()[:2] == [20.0, 7.0]
    entry = result.manifest.statistics[1]
    assert entry.kind == "mean"
    assert "reuses 'n' at no extra ε" in entry.how
    assert len(entry.measurements) == 1


@pytest.mark.parametrize(
    ("granularity", "expected"),
    [
        (0.25, 0.75),  # 0.25 and 0.5 are 1 and 2 units of 0.25
        (0.5, 0.5),  # 0.25 → round(0.5 units) = 0 (half to even), 0.5 → 1 unit
    ],
)
def test_discretization_granularity_is_exact_for_representable_values(
    granularity: float, expected: float
) -> None:
    df = pl.DataFrame({"pid": [1, 2], "region": ["n", "n"], "cost": [0.25, 0.5]})
    stat = {"name": "c", "kind": "sum", "column": "cost", "lower": 0, "upper": 1}
    loaded = spec_of(statistics=[{**stat, "granularity": granularity}])
    assert exact(df, loaded).get_column("c").to_list() == [expected, 0.0, 0.0]


def test_declared_granularity_one_sums_in_whole_units_else_a_power_of_two() -> None:
    """`granularity: 1` gives integer sums; otherwise a power of two 2^20 below the noise scale
    (here Δ/ε = 2·100/0.5 = 400 → 2^-12), whatever the column's dtype."""
    df = pl.DataFrame({"pid": [1, 2], "region": ["n", "s"], "visits": [3, 5], "cost": [1.0, 2.0]})
    stats = [
        {"name": "v", "kind": "sum", "column": "visits", "lower": 0, "upper": 20, "granularity": 1},
        {"name": "c", "kind": "sum", "column": "cost", "lower": 0, "upper": 100},
        {"name": "w", "kind": "sum", "column": "visits", "lower": 0, "upper": 100},
    ]
    loaded = spec_of(statistics=stats, postprocess={"nonnegative": False})
    result = draw_release(df, loaded, 1.5, noise=NoiseSource.seeded_for_tests(5))
    v, c, w = result.manifest.statistics
    assert (v.granularity, c.granularity, w.granularity) == (1.0, 2.0**-12, 2.0**-12)
    assert all(value == int(value) for value in result.table.get_column("v"))


def test_sensitivity_comes_from_bounds_for_both_neighbour_definitions() -> None:
    loaded = spec_of(
        max_rows_per_unit=3,
        statistics=[
            {"name": "n", "kind": "count"},
            {
                "name": "c",
                "kind": "sum",
                "column": "cost",
                "lower": -10,
                "upper": 20,
                "granularity": 1,
            },
        ],
    )
    add_remove = allocation_of(loaded, 1, ProtectedChange.ADD_REMOVE).measurements
    substitute = allocation_of(loaded, 1, ProtectedChange.SUBSTITUTE).measurements
    assert [m.sensitivity_units for m in add_remove] == [3, 60]
    assert [m.sensitivity_units for m in substitute] == [6, 120]
    ungrouped = spec_of(
        group_by=[],
        max_rows_per_unit=3,
        statistics=[
            {
                "name": "c",
                "kind": "sum",
                "column": "cost",
                "lower": -10,
                "upper": 20,
                "granularity": 1,
            }
        ],
    )
    only = allocation_of(ungrouped, 1, ProtectedChange.SUBSTITUTE).measurements[0]
    assert only.sensitivity_units == 3 * 30
    assert "Δ = 3 × 30 = 90" in only.derivation


def test_budget_split_is_exact_and_never_above_the_total() -> None:
    loaded = spec_of(
        statistics=[
            {"name": f"s{i}", "kind": "count", "weight": w} for i, w in enumerate([1, 2, 3, 0.7])
        ]
    )
    total = Fraction(1, 10)
    allocation = allocation_of(loaded, total, ProtectedChange.ADD_REMOVE)
    shares = [statistic.epsilon for statistic in allocation.statistics]
    assert allocation.split == "weights"
    assert sum(shares) == total
    assert shares[1] == 2 * shares[0]
    # what the noise actually spends, Δ/scale per measurement, never adds up to more than ε
    spent = sum(Fraction(m.sensitivity_units) / m.scale_units for m in allocation.measurements)
    assert spent <= total


def test_accuracy_first_split_shares_in_proportion_to_needs_and_reports_targets() -> None:
    df = pl.DataFrame({"pid": [1], "region": ["n"], "cost": [1.0]})
    loaded = spec_of(
        max_rows_per_unit=1,
        statistics=[
            {"name": "n", "kind": "count", "target_moe95": 10},
            {
                "name": "c",
                "kind": "sum",
                "column": "cost",
                "lower": 0,
                "upper": 100,
                "target_moe95": 1000,
            },
        ],
    )
    manifest = draw_release(df, loaded, 1.0).manifest
    n, c = manifest.statistics
    assert manifest.budget_split == "accuracy targets"
    # needs: 1·ln20/10 and 100·ln20/1000 are equal → equal shares
    assert n.epsilon_exact == c.epsilon_exact == "1/2"
    assert n.kind == "count" and n.target_met is True and n.moe95 <= 10
    assert c.kind == "sum" and c.target_met is True


def test_schema_errors_name_the_column_before_any_row_is_read() -> None:
    df = pl.DataFrame({"pid": [1], "region": ["n"], "cost": ["12"]})
    with pytest.raises(
        SchemaError, match=r"^release\.statistics\[1\]\.column: column 'cost'.*numeric"
    ):
        prepare_release(df, spec_of(), 1.0)
    with pytest.raises(SchemaError, match=r"^release\.privacy_unit: column 'pid': not found"):
        prepare_release(df.drop("pid"), spec_of(), 1.0)
    with pytest.raises(
        SchemaError, match=r"^release\.group_by\[0\]\.column: column 'region'.*domain"
    ):
        prepare_release(df.with_columns(pl.lit(1).alias("region")), spec_of(), 1.0)
    for bad in (0, -1.0, float("nan"), float("inf")):  # as the Python face reads a user's ε
        with pytest.raises(SpecError, match="epsilon"):
            dp.release(df, spec_of().spec, epsilon=bad)
    for bad_loss in (Fraction(0), Fraction(-1)):  # and prepare refuses one that is not > 0
        with pytest.raises(SpecError, match="epsilon"):
            prepare(df, spec_of(), decide_budget(spec_of(), epsilon=bad_loss))


def test_engine_errors_never_quote_confidential_values() -> None:
    """A lazy input that fails only when its rows are read, with a message polars would quote
    the offending value in: the error names the step, not the cell."""
    lf = pl.LazyFrame({"pid": [1], "region": ["n"], "cost": ["SECRET-4711"]}).with_columns(
        pl.col("cost").str.to_integer()
    )
    with pytest.raises(pl.exceptions.ComputeError, match="SECRET"):
        lf.collect()
    prepared = prepare_release(lf, spec_of(), 1.0)
    with pytest.raises(DataError) as info:
        prepared.draw()
    assert "SECRET" not in str(info.value) and "aggregating the input" in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_an_engine_panic_is_withheld_like_any_engine_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Rust panic in polars is a BaseException (pyo3's PanicException), not an Exception: it
    must not escape with its message, which may quote data."""
    from dprelease.mechanism.engines import polars as polars_engine

    def panics(*args: object) -> None:
        raise pl.exceptions.PanicException("index out of bounds at row SECRET-4711")

    df = pl.DataFrame({"pid": [1], "region": ["n"], "cost": [1.0]})
    prepared = prepare_release(df, spec_of(), 1.0)
    monkeypatch.setattr(polars_engine, "_aggregated", panics)
    with pytest.raises(DataError) as info:
        prepared.draw()
    assert "SECRET" not in str(info.value) and "PanicException" in str(info.value)


def test_seeded_noise_is_refused_without_the_explicit_flag() -> None:
    df = pl.DataFrame({"pid": [1], "region": ["n"], "cost": [1.0]})
    prepared = prepare_release(df, spec_of(), 1.0)
    with pytest.raises(UnsafeNoiseSourceError):
        prepared.draw(NoiseSource.seeded_for_tests(1))
    manifest = prepared.draw(NoiseSource.seeded_for_tests(1), allow_unsafe_noise=True).manifest
    assert manifest.noise_source.private is False
    assert prepared.draw().manifest.noise_source.private is True


def test_manifest_reveals_nothing_about_the_data() -> None:
    """Two different datasets, same spec and ε: manifests equal but for id and time."""
    small = pl.DataFrame({"pid": [1], "region": ["n"], "cost": [1.0]})
    large = pl.DataFrame({"pid": list(range(500)), "region": ["s"] * 500, "cost": [1e6] * 500})
    a = prepare_release(small, spec_of(), 0.7).draw().manifest.to_json_dict()
    b = prepare_release(large, spec_of(), 0.7).draw().manifest.to_json_dict()
    for manifest in (a, b):
        manifest.pop("release_id"), manifest.pop("created_at")
    assert a == b


def test_noisy_cells_are_unbiased_with_the_manifest_variance() -> None:
    """400 noisy copies of each cell of a fixed 3-cell table, from a seeded source: 4 releases
    of a table that repeats the 3 cells in 100 blocks (each block's regions hold the same rows),
    so the noise is drawn in batches and both the cells of one release and successive releases
    of one prepared release must be independent.

    Means: per-cell z-tests, Bonferroni over cells, family false-alarm rate 1e-3. Variance: pooled
    over cells, relative tolerance 6 standard errors of a Laplace sample variance (≈ sqrt(5/N)).
    """
    draws, blocks = 4, 100
    regions = [f"{region}{block}" for block in range(blocks) for region in "nse"]
    rows_per_region = {"n": 20, "s": 10, "e": 0}
    keys = [name for name in regions for _ in range(rows_per_region[name[0]])]
    df = pl.DataFrame({"pid": range(len(keys)), "region": keys, "cost": [40.0] * len(keys)})
    loaded = spec_of(
        max_rows_per_unit=1,
        postprocess={"nonnegative": False},
        group_by=[{"column": "region", "domain": {"values": regions}}],
    )
    truth = {"n": np.array([20, 10, 0]), "cost": np.array([800.0, 400.0, 0.0])}
    prepared = prepare_release(df, loaded, 0.5)
    source = NoiseSource.seeded_for_tests(20261129)
    runs = [prepared.draw(source, allow_unsafe_noise=True) for _ in range(draws)]
    assert all(run.table.get_column("region").to_list() == regions for run in runs)
    stats = {entry.name: entry for entry in runs[0].manifest.statistics}
    from scipy.stats import norm

    z_crit = norm.isf(1e-3 / 2 / 6)  # 2 statistics × 3 cells, two-sided
    for name in ("n", "cost"):
        # one row per noisy copy of the 3 cells: (draws × blocks, 3)
        raw = np.concatenate([r.table.get_column(name).to_numpy() for r in runs]).reshape(-1, 3)
        assert raw.shape == (400, 3)
        expected_var = stats[name].variance
        deviations = raw.astype(float) - truth[name]
        z = deviations.mean(axis=0) / math.sqrt(expected_var / len(raw))
        assert np.all(np.abs(z) < z_crit), (name, z)
        pooled = float(np.mean(deviations**2))
        assert abs(pooled / expected_var - 1) < 6 * math.sqrt(5 / deviations.size), name
    assert stats["n"].variance == pytest.approx(
        laplace_variance(Fraction(stats["n"].noise_scale_units_exact))
    )


def test_text_keys_values_and_dates_are_parsed_never_refused(tmp_path) -> None:
    """CSV is text: integral numbers are integer keys, booleans are true/false, periods are ISO
    dates; whatever does not parse is outside the domain, in no period, or a null value."""
    path = tmp_path / "in.csv"
    path.write_text(
        "pid,age,member,cost,day\n"
        "1,1,true,5,2024-03-01\n"
        "2,1.0,False,x,2024-03-31 23:59:00\n"
        "3,1.5,true,5,2024-03-02\n"  # 1.5 is no integer key
        "4,2,yes,5,2024-03-02\n"  # yes is no boolean
        "5,2,true,5,03/02/2024\n"  # not an ISO date: in no period
        "6,2,true,5,2024-04-01\n"
    )
    loaded = spec_of(
        max_rows_per_unit=1,
        period={"column": "day"},
        group_by=[
            {"column": "age", "domain": {"min": 1, "max": 2}},
            {"column": "member", "domain": {"values": [True, False]}},
        ],
    )
    table = exact(path, loaded, period="2024-03")
    assert table.select("age", "member", "n", "cost").rows() == [
        (1, True, 1, 5.0),
        (1, False, 1, 0.0),
        (2, True, 0, 0.0),
        (2, False, 0, 0.0),
    ]


def test_pandas_object_columns_are_text() -> None:
    """A pandas dtype is a declared type: an object column is text, refused for a sum as a
    parquet String column is (tests/unit/test_outsiders.py has the rest)."""
    df = pd.DataFrame({"pid": [1, 2, 3], "region": ["n", "n", "s"], "cost": [7, "x", None]})
    assert df["cost"].dtype == object
    with pytest.raises(SchemaError, match="has dtype String but statistic 'cost' needs a numer"):
        exact(df, spec_of())


@pytest.mark.parametrize(
    ("granularity", "upper", "message"),
    [
        (0, 100, r"statistics\[1\]\.granularity: Input should be greater than 0"),
        (-0.5, 100, r"statistics\[1\]\.granularity: Input should be greater than 0"),
        (50, 10, r"statistics\[1\]\.granularity: granularity is coarser than the bounds' range"),
        (2.0**-60, 100, r"statistics\[1\]: sensitivity of \d+ units is above 2\^53"),
    ],
)
def test_a_granularity_that_cannot_work_is_refused_before_the_release(
    granularity: float, upper: float, message: str
) -> None:
    """Refused by name in `prepare()`, from the spec alone: nothing is reserved or drawn."""
    df = pl.DataFrame({"pid": [1], "region": ["n"], "cost": [1.0]})
    stats = [
        {"name": "n", "kind": "count"},
        {"name": "cost", "kind": "sum", "column": "cost", "lower": 0, "upper": upper,
         "granularity": granularity},
    ]  # fmt: skip
    with pytest.raises(SpecError, match=message):
        prepare_release(df, spec_of(statistics=stats), 1.0)
