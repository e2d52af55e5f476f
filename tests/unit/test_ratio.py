"""`ratio`: Σ w·y / Σ w·x per cell, with its 95% margin from the exact noise laws of both sums
(post-processing of two noisy sums, as a mean divides a sum by a count)."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers import allocation_of, draw_release, exact_table, make_spec, prepare_release
from polars.testing import assert_frame_equal
from pydantic import ValidationError

import dprelease as dp
from dprelease.errors import SchemaError, SpecError
from dprelease.mechanism.noise import NoiseSource, laplace_moe95
from dprelease.spec import MOE95_SUFFIX, UNDEFINED_SUFFIX, UNINFORMATIVE_SUFFIX
from dprelease.statement import json_schema

ROWS = pl.DataFrame(
    {
        "pid": [1, 2, 3, 4, 5, 6, 7, 8],
        "region": ["n", "n", "n", "s", "s", "s", None, "x"],
        "income": [30.0, 50.0, 400.0, 20.0, None, 10.0, 5.0, 7.0],
        "earners": [1.0, 2.0, 1.0, 0.0, 1.0, 3.0, 1.0, 1.0],
        "wt": [2.0, 1.0, 1.0, 4.0, 1.0, 0.5, 1.0, 1.0],
    }
)
SIDES = {"numerator": {"column": "income", "lower": 0, "upper": 100},
         "denominator": {"column": "earners", "lower": 0, "upper": 2}}  # fmt: skip
PER_EARNER = {"name": "per_earner", "kind": "ratio", **SIDES, "lower": 0, "upper": 100}
GROUPS = [{"column": "region", "domain": {"values": ["n", "s", "e"]}}]


def ratio_spec(*statistics: dict, **overrides: object):
    return make_spec(
        privacy_unit="pid", max_rows_per_unit=1, group_by=GROUPS,
        statistics=[{"name": "n", "kind": "count"}, *statistics], **overrides,
    )  # fmt: skip


def test_a_ratio_is_the_clamped_sums_quotient_exactly_without_noise() -> None:
    """n: (30 + 50 + 100) / (1 + 2 + 1) = 45 (400 clamped to 100); s: (20 + 0 + 10) / (0 + 1 + 2)
    = 10 (a null income is 0, 3 earners clamped to 2); e: no row, so the ratio is undefined."""
    table = exact_table(ROWS, ratio_spec(PER_EARNER), epsilon=1e6)
    assert table["per_earner"].to_list() == pytest.approx([45.0, 10.0, None], abs=1e-3)
    assert table[f"per_earner{UNDEFINED_SUFFIX}"].to_list() == [False, False, True]
    assert table[f"per_earner{UNINFORMATIVE_SUFFIX}"].to_list() == [False, False, None]


def test_a_weighted_ratio_weights_both_sums() -> None:
    """n: (60 + 50 + 100) / (2 + 2 + 1) = 42; s: (80 + 0 + 5) / (0 + 1 + 1) = 42.5."""
    weighted = {**PER_EARNER, "survey_weight": {"column": "wt", "upper": 5}}
    table = exact_table(ROWS, ratio_spec(weighted), epsilon=1e6)
    assert table["per_earner"].to_list()[:2] == pytest.approx([42.0, 42.5], abs=1e-3)


def test_a_ratio_reuses_the_sums_it_can_and_measures_the_rest_from_its_share() -> None:
    income = {"name": "income", "kind": "sum", **SIDES["numerator"]}
    allocation = allocation_of(ratio_spec(income, PER_EARNER), Fraction(1))
    _, total, ratio = allocation.statistics
    assert ratio.reused == ("income",) and ratio.measurement is total.measurement
    assert ratio.loss.epsilon == Fraction(1, 3)
    assert [m.name for m in ratio.own()] == ["ratio:per_earner:denominator"]
    # one row moves the denominator's sum by at most its upper bound, 2
    assert ratio.count.sensitivity == 2.0
    both = allocation_of(ratio_spec(PER_EARNER), Fraction(1)).statistics[1]
    assert [m.name for m in both.own()] == [
        "ratio:per_earner:numerator", "ratio:per_earner:denominator",
    ]  # fmt: skip
    assert both.measurement.loss.epsilon == both.count.loss.epsilon == Fraction(1, 4)


def test_its_margin_comes_from_the_exact_laws_of_both_noises() -> None:
    """Per cell: (h_y + ratio·h_x) / x̂ (first-order, as a mean's), h the exact discrete Laplace
    95% margins at the sampled scales, x̂ the noisy denominator (released as the sum it reuses),
    rounded up at the sixth decimal, and never past the farther bound."""
    earners = {"name": "earners", "kind": "sum", **SIDES["denominator"]}
    spec = ratio_spec(earners, PER_EARNER, postprocess={"decimals": 6})
    ratio = prepare_release(ROWS, spec, 1).allocation.statistics[2]
    h_y = laplace_moe95(ratio.measurement.scale_units) * float(ratio.measurement.granularity)
    h_x = laplace_moe95(ratio.count.scale_units) * float(ratio.count.granularity)
    checked = 0
    for seed in range(20):
        table = draw_release(ROWS, spec, 1, noise=NoiseSource.seeded_for_tests(seed)).table
        for value, margin, x in zip(
            table["per_earner"], table[f"per_earner{MOE95_SUFFIX}"], table["earners"], strict=True
        ):
            if x is None or x <= 0:
                assert value is None
                continue
            first_order = (h_y + abs(value) * h_x) / x
            reach = max(value, 100 - value)
            # x̂ and the ratio as released are rounded at the sixth decimal too
            assert margin == pytest.approx(min(first_order, reach), rel=1e-5)
            checked += 1
    assert checked >= 20


def test_its_margin_covers_the_truth_at_least_95_percent_of_the_time() -> None:
    """150 cells of 400–1,600 rows, 5 seeded releases at ε = 2: 750 intervals. First-order
    propagation of two 95% margins is conservative (their sum is above the quadrature); if the
    true coverage were 95%, seeing fewer than 93% covered would have probability < 0.5%."""
    rng = np.random.default_rng(7)
    cells = 150
    sizes = rng.integers(400, 1_600, cells)
    cell = np.repeat(np.arange(cells), sizes)
    earners = rng.integers(0, 3, cell.size).astype(float)
    income = np.clip(earners * rng.uniform(5, 15, cells)[cell] + rng.normal(0, 3, cell.size), 0, 50)
    data = pl.DataFrame({"cell": cell, "income": income, "earners": earners})
    spec = make_spec(
        group_by=[{"column": "cell", "domain": {"min": 0, "max": cells - 1}}],
        privacy_unit=None, max_rows_per_unit=None,
        statistics=[{"name": "r", "kind": "ratio",
                     "numerator": {"column": "income", "lower": 0, "upper": 50},
                     "denominator": {"column": "earners", "lower": 0, "upper": 2},
                     "lower": 0, "upper": 100}],
        postprocess={"decimals": 6},
    )  # fmt: skip
    truth = (
        data.group_by("cell")
        .agg(pl.col("income").sum() / pl.col("earners").sum())
        .sort("cell")
        .get_column("income")
    )
    covered = 0
    for seed in range(5):
        table = draw_release(data, spec, 2, noise=NoiseSource.seeded_for_tests(200 + seed)).table
        covered += int(((table["r"] - truth).abs() <= table[f"r{MOE95_SUFFIX}"]).sum())
    assert covered / (5 * cells) >= 0.93


def test_the_manifest_states_the_ratio_and_its_schema_knows_it() -> None:
    income = {"name": "income", "kind": "sum", **SIDES["numerator"]}
    entry = draw_release(ROWS, ratio_spec(income, PER_EARNER)).manifest.statistics[2]
    assert (entry.kind, entry.numerator.column, entry.denominator.column, entry.reuses) == (
        "ratio", "income", "earners", ["income"],
    )  # fmt: skip
    assert "reuses 'income' at no extra ε" in entry.how
    assert [m.name for m in entry.measurements] == ["ratio:per_earner:denominator"]
    assert "RatioEntry" in json_schema()


def test_the_planner_states_the_numerators_noise_and_refuses_a_target() -> None:
    denominator = {"name": "earners", "kind": "sum", **SIDES["denominator"]}
    spec = ratio_spec(denominator, PER_EARNER).spec
    row = dp.plan(spec, epsilon=1).statistics[2]
    assert (row.kind, row.moe95, row.reuses) == ("ratio", None, ["earners"])
    assert row.sensitivity == 100.0  # its own numerator's, not the reused denominator's
    assert [m.sensitivity for m in row.measurements] == [100.0]
    with pytest.raises(SpecError, match="'per_earner' is a ratio: its margin depends"):
        dp.plan(spec, epsilon=1, targets={"per_earner": 1.0})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"denominator": {"column": "earners", "lower": -1, "upper": 2}}, "denominator.lower"),
        ({"lower": 5, "upper": 5}, "must be <"),
        ({"numerator": {"column": "income", "lower": 0}}, "upper"),
        ({"target_moe95": 0.1}, "target_moe95"),
    ],
)
def test_the_spec_refuses_a_ratio_it_cannot_bound(change: dict, message: str) -> None:
    with pytest.raises((SpecError, ValidationError), match=message):
        ratio_spec({**PER_EARNER, **change})


def test_an_accuracy_first_split_refuses_a_ratio_that_measures_its_own_sums() -> None:
    with pytest.raises(SpecError, match="a ratio must reuse a sum for its numerator"):
        make_spec(statistics=[{"name": "n", "kind": "count", "target_moe95": 5}, PER_EARNER])


def test_the_declared_schema_must_give_numbers_on_both_sides() -> None:
    data = ROWS.with_columns(pl.col("earners").cast(pl.String))
    with pytest.raises(SchemaError, match="earners") as refused:
        prepare_release(data, ratio_spec(PER_EARNER))
    assert refused.value.column == "earners"
    assert "statistics[1].denominator.column" in str(refused.value)


@pytest.mark.spark
def test_the_spark_engine_releases_the_same_ratios(tmp_path: Path) -> None:
    from sparktest import local_session

    local_session()
    path = tmp_path / "rows.parquet"
    ROWS.write_parquet(path)
    weighted = {**PER_EARNER, "name": "w", "survey_weight": {"column": "wt", "upper": 5}}
    spec = ratio_spec(PER_EARNER, weighted)
    on_spark = exact_table(path, spec, epsilon=1e6, engine="spark")
    assert_frame_equal(on_spark, exact_table(path, spec, epsilon=1e6, engine="polars"))
    assert not math.isnan(on_spark["w"][0])
