"""`share`: the proportion per cell of rows whose column holds one of public categories, with its
95% margin from the exact noise laws (a mean of an indicator: post-processing of a noisy count in
the categories and the cell's noisy count)."""

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
        "pid": [1, 2, 3, 4, 5, 6, 7, 8, 9],
        "region": ["n", "n", "n", "n", "s", "s", "s", None, "x"],
        "insurance": ["private", "none", "public", "private", None, "private", "uninsured",
                      "private", "public"],
        "code": [1, 2, 1, None, 1.0, 3, 2, 1, 1],
        "wt": [10.0, 1.0, 2.0, 3.0, 4.0, 5.0, None, 1.0, 1.0],
    },
    strict=False,
)  # fmt: skip
INSURED = {"name": "insured", "kind": "share", "column": "insurance",
           "categories": ["private", "public"]}  # fmt: skip
CODE_ONE = {"name": "code_one", "kind": "share", "column": "code", "categories": [1]}
GROUPS = [{"column": "region", "domain": {"values": ["n", "s", "e"]}}]


def share_spec(*statistics: dict, **overrides: object):
    return make_spec(
        privacy_unit="pid", max_rows_per_unit=1, group_by=GROUPS,
        statistics=[{"name": "n", "kind": "count"}, *statistics], **overrides,
    )  # fmt: skip


def test_a_share_is_the_rows_in_its_categories_over_the_cells_rows_exactly_without_noise() -> None:
    """n: 3 of 4 insured ("none" is outside), code 1 in 2 of 4 (a null code is outside); s: 1 of
    3 insured (a null is outside), code 1 in 1 of 3 (1.0 is the number 1); e: no row, so the
    share is undefined there (null and flagged)."""
    table = exact_table(ROWS, share_spec(INSURED, CODE_ONE), epsilon=1e6)
    assert table.select("region", "n").rows() == [("n", 4), ("s", 3), ("e", 0)]
    assert table["insured"].to_list() == pytest.approx([0.75, 1 / 3, None], abs=1e-3)
    assert table["code_one"].to_list() == pytest.approx([0.5, 1 / 3, None], abs=1e-3)
    assert table[f"insured{UNDEFINED_SUFFIX}"].to_list() == [False, False, True]
    assert table[f"insured{UNINFORMATIVE_SUFFIX}"].to_list() == [False, False, None]


def test_a_weighted_share_is_a_share_of_the_weights() -> None:
    """n: (10 + 2 + 3) / 16 of the weights insured; s: 5 / 9 (a null weight counts as 0)."""
    weighted = {**INSURED, "survey_weight": {"column": "wt", "upper": 20}}
    spec = share_spec(weighted, survey_weight=None)
    table = exact_table(ROWS, spec, epsilon=1e6)
    assert table["insured"].to_list()[:2] == pytest.approx([15 / 16, 5 / 9], abs=1e-3)
    manifest = draw_release(ROWS, spec, 1).manifest.statistics[1]
    assert manifest.survey_weight is not None and manifest.measurements[1].kind == "count"


def test_a_share_reuses_the_count_and_spends_on_its_categories_alone() -> None:
    allocation = allocation_of(share_spec(INSURED), Fraction(1))
    count, share = allocation.statistics
    assert share.reused == ("n",) and share.count is count.measurement
    assert share.loss.epsilon == Fraction(1, 2) and [m.name for m in share.own()] == [
        "share:insured:sum"
    ]
    # one row moves the rows in the categories by at most 1: a count's Δ, in integer units
    assert (share.measurement.sensitivity_units, share.measurement.granularity) == (1, 1)


def test_its_margin_comes_from_the_exact_laws_of_both_noises() -> None:
    """Per cell: (h_in + share·h_n) / n (first-order, as a mean's), h the exact discrete
    Laplace 95% margins at the sampled scales, rounded up to the share's place."""
    spec = share_spec(INSURED)
    allocation = prepare_release(ROWS, spec, 1).allocation
    share = allocation.statistics[1]
    h_in = laplace_moe95(share.measurement.scale_units) * float(share.measurement.granularity)
    h_n = laplace_moe95(share.count.scale_units)
    table = exact_table(ROWS, spec, epsilon=1)
    for value, margin, n in zip(
        table["insured"], table[f"insured{MOE95_SUFFIX}"], table["n"], strict=True
    ):
        if n <= 0:
            continue
        first_order = (h_in + value * h_n) / n
        assert margin >= min(first_order, max(value, 1 - value)) - 0.05  # rounded up, or bound
        assert margin <= max(value, 1 - value) + 1e-12  # never past the farther of [0, 1]


def test_its_margin_covers_the_truth_at_least_95_percent_of_the_time() -> None:
    """200 cells of 400–1,600 rows, 5 seeded releases at ε = 1: 1,000 intervals. First-order
    propagation of two 95% margins is conservative here (their sum is above the quadrature); if
    the true coverage were 95%, seeing fewer than 93% covered would have probability < 0.2%."""
    rng = np.random.default_rng(5)
    cells = 200
    sizes = rng.integers(400, 1_600, cells)
    truth = rng.uniform(0.05, 0.95, cells)
    region = np.repeat(np.arange(cells), sizes)
    insured = rng.random(region.size) < truth[region]
    data = pl.DataFrame({"cell": region, "insured": np.where(insured, "yes", "no")})
    spec = make_spec(
        group_by=[{"column": "cell", "domain": {"min": 0, "max": cells - 1}}],
        privacy_unit=None, max_rows_per_unit=None,
        statistics=[{"name": "n", "kind": "count"},
                    {"name": "s", "kind": "share", "column": "insured", "categories": ["yes"]}],
        postprocess={"decimals": 6},
    )  # fmt: skip
    exact = data.group_by("cell").agg((pl.col("insured") == "yes").mean()).sort("cell")
    covered = 0
    for seed in range(5):
        noise = NoiseSource.seeded_for_tests(100 + seed)
        table = draw_release(data, spec, 1, noise=noise).table
        covered += int(((table["s"] - exact["insured"]).abs() <= table[f"s{MOE95_SUFFIX}"]).sum())
    assert covered / (5 * cells) >= 0.93


def test_the_manifest_states_the_share_and_its_schema_knows_it() -> None:
    entry = draw_release(ROWS, share_spec(INSURED)).manifest.statistics[1]
    assert (entry.kind, entry.column, entry.categories, entry.reuses) == (
        "share", "insurance", ["private", "public"], ["n"],
    )  # fmt: skip
    assert "one of the categories" in entry.how and "reuses 'n' at no extra ε" in entry.how
    assert [m.kind for m in entry.measurements] == ["sum"]
    assert "ShareEntry" in json_schema()


def test_the_planner_states_its_accuracy_and_refuses_a_target_on_it() -> None:
    spec = share_spec(INSURED).spec
    row = dp.plan(spec, epsilon=1).statistics[1]
    assert (row.kind, row.moe95, row.reuses) == ("share", None, ["n"])
    assert row.sensitivity == 1.0 and row.epsilon == 0.5
    assert [m.kind for m in row.measurements] == ["sum"]
    with pytest.raises(SpecError, match="'insured' is a share: its margin depends on each cell"):
        dp.plan(spec, epsilon=1, targets={"insured": 0.1})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"categories": []}, "at least 1 item"),
        ({"categories": [True]}, "not true or false"),
        ({"categories": ["a", "a"]}, "each category may appear once"),
        ({"categories": [1, "a"]}, "categories"),
        ({"target_moe95": 0.1}, "target_moe95"),
    ],
)
def test_the_spec_refuses_categories_it_cannot_compare(change: dict, message: str) -> None:
    with pytest.raises((SpecError, ValidationError), match=message):
        share_spec({**INSURED, **change})


def test_an_accuracy_first_split_refuses_a_share() -> None:
    with pytest.raises(SpecError, match="a share has no margin of its own to target"):
        make_spec(statistics=[{"name": "n", "kind": "count", "target_moe95": 5}, INSURED])


@pytest.mark.parametrize(
    ("statistic", "column", "why"),
    [
        (INSURED, "insurance", "compares it with text categories"),
        ({**CODE_ONE, "column": "insurance"}, "insurance", "compares it with numbers"),
    ],
)
def test_the_declared_schema_must_fit_the_categories(
    statistic: dict, column: str, why: str
) -> None:
    data = ROWS.with_columns(pl.col("code").cast(pl.Int64).alias("insurance"))
    if why.endswith("numbers"):
        data = ROWS
    with pytest.raises(SchemaError, match=why) as refused:
        prepare_release(data, share_spec(statistic))
    assert refused.value.column == column and "statistics[1].column" in str(refused.value)


def test_text_input_is_compared_as_written(tmp_path: Path) -> None:
    """A CSV's columns are untyped text: "1" and "1.0" are the number 1 for number categories,
    and text categories compare the text as it is."""
    path = tmp_path / "rows.csv"
    ROWS.write_csv(path)
    from_csv = exact_table(path, share_spec(INSURED, CODE_ONE), epsilon=1e6)
    assert_frame_equal(from_csv, exact_table(ROWS, share_spec(INSURED, CODE_ONE), epsilon=1e6))


@pytest.mark.spark
def test_the_spark_engine_releases_the_same_shares(tmp_path: Path) -> None:
    from sparktest import local_session

    local_session()
    path = tmp_path / "rows.parquet"
    ROWS.write_parquet(path)
    weighted = {**CODE_ONE, "name": "w", "survey_weight": {"column": "wt", "upper": 20}}
    spec = share_spec(INSURED, CODE_ONE, weighted)
    on_spark = exact_table(path, spec, epsilon=1e6, engine="spark")
    assert_frame_equal(on_spark, exact_table(path, spec, epsilon=1e6, engine="polars"))
    assert not math.isnan(on_spark["w"][0])
