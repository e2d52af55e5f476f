"""Survey-weighted quantiles: the unweighted mechanism on weight mass.

Each kept row weighs its survey weight clamped to [0, W] and rounded to a public step g (an
integer number of steps ≤ W/g), and the histograms hold those integer masses. Checked here: the
values' law is the exact permute-and-flip law of the weighted scores (χ², false-alarm rate 1e-4
per case); the 95% intervals cover the weighted quantile (false-alarm rate 0.13% per check); on
unit weights with a unit step it is the unweighted mechanism (the same plan, the same output
for the same seed); one unit's change moves every score and the ladder by at most the stated Δ
(a hypothesis property); the plan states its accuracy in weight, W times a row's.
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction
from typing import Any

import numpy as np
import polars as pl
import pytest
from helpers import allocation_of, draw_release, invoke_cli, make_spec, one_line_error, words
from hypothesis import given, settings
from hypothesis import strategies as st
from test_quantiles import HALF, QUARTILES, chi_square_pvalue, exact_values_law, true_quantile

import dprelease.mechanism.quantiles._plan as qp
import dprelease.mechanism.quantiles._release as q
from dprelease.change import ProtectedChange
from dprelease.loss import PrivacyLoss
from dprelease.mechanism.engines import EngineJob, get_engine, new_salt
from dprelease.mechanism.noise import NoiseSource
from dprelease.statement import plan as plan_release

#: Weight mass per grid point of one cell, in steps (rows of weights 1 to 4 steps).
MASS = [7, 0, 3, 12, 5, 2]


def weighted_plan(
    ps: list[Fraction],
    epsilon: Fraction | int,
    bins: int,
    per_row: int,
    rows: int = 1,
    neighbours: ProtectedChange = ProtectedChange.ADD_REMOVE,
) -> qp.QuantilePlan:
    return qp.plan_quantiles(
        ps, Fraction(epsilon), bins, rows, neighbours, mass_per_row=per_row, mass_unit=Fraction(1)
    )


def sample_values(hist: list[int], pl_: qp.QuantilePlan, cells: int, seed: int) -> Counter:
    table = np.tile(np.asarray(hist, dtype=np.int64), (cells, 1))
    values = q._release_values(*q._cumulative(table), pl_, NoiseSource.seeded_for_tests(seed))
    return Counter(map(tuple, values.tolist()))


# --------------------------------------------------------------------------- exactness


@pytest.mark.parametrize(("ps", "epsilon"), [([HALF], 1), ([Fraction(1, 3)], 2), (QUARTILES, 6)])
def test_weighted_values_follow_the_exact_law(ps: list[Fraction], epsilon: int) -> None:
    """χ² of 40,000 draws on a histogram of weight mass (W = 4 steps a row) against the law
    enumerated from the definition (scores of the mass, coins exp(−(S − S_min)/scale) at the
    plan's scales, W times a row's): false-alarm rate 1e-4 per case."""
    pl_ = weighted_plan(ps, epsilon, len(MASS), per_row=4)
    law = exact_values_law(MASS, pl_)
    assert len([k for k in law if law[k] * 40_000 >= 5]) >= 5  # many outcomes: a wrong law shows
    assert chi_square_pvalue(sample_values(MASS, pl_, 40_000, seed=21), law, 40_000) > 1e-4


def test_the_weighted_law_is_not_the_law_of_a_row_sized_delta() -> None:
    """The same draws against the law a Δ of one step per row would give are rejected: the χ²
    above sees the scale W sets (power)."""
    pl_ = weighted_plan([HALF], 1, len(MASS), per_row=4)
    rows_delta = weighted_plan([HALF], 1, len(MASS), per_row=1)
    observed = sample_values(MASS, pl_, 40_000, seed=21)
    assert chi_square_pvalue(observed, exact_values_law(MASS, rows_delta), 40_000) < 1e-6


def test_unit_weights_at_a_unit_step_are_the_unweighted_mechanism() -> None:
    """W = 1 in steps of 1: the plan is the unweighted plan, field for field, so the values'
    law is too; through a release, the same seed gives the same table, interval and all."""
    for ps in ([HALF], QUARTILES):
        assert weighted_plan(ps, 2, 50, per_row=1, rows=2) == qp.plan_quantiles(
            ps, Fraction(2), 50, 2, ProtectedChange.ADD_REMOVE
        )
    rng = np.random.default_rng(2)
    data = pl.DataFrame(
        {
            "g": rng.integers(1, 4, 3000),
            "x": rng.lognormal(3, 0.6, 3000).round(1),
            "one": np.ones(3000),
        }
    )
    base: dict[str, Any] = {
        "name": "t",
        "source": "t",
        "group_by": [{"column": "g", "domain": {"min": 1, "max": 3}}],
    }
    quartiles = {
        "name": "q",
        "kind": "quantile",
        "column": "x",
        "lower": 0,
        "upper": 100,
        "resolution": 0.5,
        "p": [0.25, 0.5, 0.75],
    }
    unit = {"survey_weight": {"column": "one", "upper": 1}, "weight_resolution": 1}
    tables = [
        draw_release(
            data, make_spec(base, statistics=[stat]), 1, noise=NoiseSource.seeded_for_tests(5)
        ).table
        for stat in (quartiles, quartiles | unit)
    ]
    assert tables[0].equals(tables[1])
    assert not tables[0]["q_p50_uninformative"].any()  # informative: the equality says something


# --------------------------------------------------------------------------- coverage


def weighted_cases(rng: np.random.Generator, bins: int, cells: int) -> dict[str, np.ndarray]:
    """Histograms of weight mass: log-normal values with skewed weights (1 to 100 steps, the
    large weights on the large values, so the weighted and unweighted quantiles differ), all
    weight on one point, and the weighted median in a gap between two clusters."""
    out = {}
    for n in (60, 2000):
        values = np.clip((rng.lognormal(0, 1, (cells, n)) * bins / 8).astype(int), 0, bins - 1)
        weights = np.clip(rng.gamma(2, 10, (cells, n)) * (1 + values / bins), 1, 100).astype(int)
        hist = np.zeros((cells, bins), dtype=np.int64)
        for row, v, w in zip(hist, values, weights, strict=True):
            np.add.at(row, v, w)
        out[f"weighted lognormal n={n}"] = hist
    one_point = np.zeros((cells, bins), dtype=np.int64)
    one_point[:, bins // 3] = 500 * 37
    two_clusters = np.zeros((cells, bins), dtype=np.int64)
    two_clusters[:, 10] = 150 * 60
    two_clusters[:, bins - 10] = 150 * 60
    return {**out, "one point": one_point, "two clusters": two_clusters}


@pytest.mark.parametrize("epsilon", [Fraction(1, 2), Fraction(4)])
def test_weighted_intervals_cover_at_least_95_percent(epsilon: Fraction) -> None:
    """Over 1,000 cells per case and p (W = 100 steps a row, quartiles), the interval holds the
    cell's weighted quantile at least 93.1% of the time: at exactly 95%, 1,000 cells would fall
    below that (3 standard errors) with probability 0.13%, each check's false-alarm rate."""
    rng = np.random.default_rng(13)
    bins, cells = 200, 1000
    pl_ = weighted_plan(QUARTILES, epsilon, bins, per_row=100)
    for name, hist in weighted_cases(rng, bins, cells).items():
        release = q.release_quantiles(hist, pl_, NoiseSource.seeded_for_tests(17))
        for i, p in enumerate(pl_.ps):
            truth = true_quantile(hist, p)
            covered = np.mean((release.low[:, i] <= truth) & (truth <= release.high[:, i]))
            assert covered >= 0.931, (name, p, covered)


def test_weighted_intervals_are_informative_on_dense_cells() -> None:
    """The coverage above could not fail with whole-grid intervals: at ε = 4 on 2,000 rows of
    weights up to 100 steps, the median's interval spans a small part of the grid and the value
    is within a step or two of the weighted median (not of the unweighted one, which differs)."""
    rng = np.random.default_rng(14)
    bins = 200
    hist = weighted_cases(rng, bins, 300)["weighted lognormal n=2000"]
    release = q.release_quantiles(
        hist, weighted_plan([HALF], 4, bins, per_row=100), NoiseSource.seeded_for_tests(18)
    )
    truth = true_quantile(hist, HALF)
    assert np.median(release.high - release.low) < bins / 5
    assert np.median(np.abs(release.values[:, 0] - truth)) <= 2


# --------------------------------------------------------------------------- sensitivity


@st.composite
def neighbouring_tables(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, int, int, bool]:
    """Two cells of weight mass and the same tables after one unit's change: R rows, each of
    at most W steps, removed, added, or (substitution) both, anywhere on the grid."""
    bins = draw(st.integers(1, 8))
    per_row = draw(st.integers(1, 50))
    rows = draw(st.integers(1, 3))
    substitute = draw(st.booleans())
    table = np.array(
        draw(st.lists(st.lists(st.integers(0, 200), min_size=bins, max_size=bins), min_size=2,
                      max_size=2)),
        dtype=np.int64,
    )  # fmt: skip
    row = st.tuples(st.integers(0, 1), st.integers(0, bins - 1), st.integers(0, per_row))
    other = table.copy()
    remove = substitute or draw(st.booleans())
    if remove:
        for cell, point, weight in draw(st.lists(row, min_size=1, max_size=rows)):
            other[cell, point] -= min(weight, other[cell, point])
    if substitute or not remove:
        for cell, point, weight in draw(st.lists(row, min_size=1, max_size=rows)):
            other[cell, point] += weight
    return table, other, per_row, rows, substitute


@settings(max_examples=300, deadline=None)
@given(neighbouring_tables(), st.sampled_from([[HALF], [Fraction(1, 10)], QUARTILES]))
def test_one_unit_moves_every_score_and_the_ladder_by_at_most_the_stated_delta(
    tables: tuple[np.ndarray, np.ndarray, int, int, bool], ps: list[Fraction]
) -> None:
    """Summed over the cells, no p's score moves by more than the plan's Δ (2·max(a, d − a) ×
    rows moved × W, in 1/(2d) steps), and the ladder's blocks by more than rows moved × W."""
    table, other, per_row, rows, substitute = tables
    change = ProtectedChange.SUBSTITUTE if substitute else ProtectedChange.ADD_REMOVE
    pl_ = weighted_plan(ps, 1, table.shape[1], per_row, rows=rows, neighbours=change)
    for i, p in enumerate(pl_.ps):
        one = q._value_scores(*q._cumulative(table), p)
        two = q._value_scores(*q._cumulative(other), p)
        assert np.abs(one - two).max(axis=1).sum() <= pl_.value_score_sensitivity[i]
    # any cuts: a block of the ladder is a run of grid points; the blocks of single points are
    # the finest, and every coarser block moves by at most the sum of its points
    assert np.abs(table - other).sum() <= pl_.mass_moved


# --------------------------------------------------------------------------- spec, plan, faces

BASE: dict[str, Any] = {
    "name": "t",
    "source": "t",
    "privacy_unit": "pid",
    "max_rows_per_unit": 2,
    "group_by": [{"column": "g", "domain": {"values": ["a", "b"]}}],
}
MEDIAN = {"name": "mid", "kind": "median", "column": "x", "lower": 0, "upper": 100, "resolution": 1}
WEIGHT = {"column": "w", "upper": 100}


def test_the_plan_states_delta_and_accuracy_in_weight_w_times_a_rows() -> None:
    """W = 100 at the default step 2^-10 (2^16 ≤ 102,400 steps < 2^17): Δ and the 95% rank
    error are exactly W times the unweighted statistic's, in weight; the manifest's entry and
    the planner say so, and the derivation names W."""
    weighted = make_spec(BASE, statistics=[MEDIAN], survey_weight=WEIGHT)
    plain = make_spec(BASE, statistics=[MEDIAN])
    (wq,) = allocation_of(weighted).quantiles
    (uq,) = allocation_of(plain).quantiles
    assert (wq.plan.mass_unit, wq.plan.mass_per_row) == (Fraction(1, 1024), 102_400)
    assert wq.plan.mass_moved == 2 * 102_400  # R = 2 rows, each of at most W
    entry, plain_entry = (
        wq.entry(weighted.spec.postprocess, None, None),
        uq.entry(plain.spec.postprocess, None, None),
    )
    assert entry.survey_weight is not None
    assert entry.survey_weight.mass_moved_exact == "200"
    assert entry.survey_weight.resolution_exact == "1/1024"
    (value,), (plain_value,) = entry.quantiles, plain_entry.quantiles
    assert value.score_sensitivity == 100 * plain_value.score_sensitivity == 100
    assert value.rank_error95 == pytest.approx(100 * plain_value.rank_error95, rel=1e-12)
    assert value.interval_rank_halfwidth95 == pytest.approx(
        100 * plain_value.interval_rank_halfwidth95,
        rel=1e-4,  # a finer lattice of steps
    )
    assert "W = 100" in entry.derivation and "in weight" in entry.error_in_units
    assert "weighted p-quantile" in entry.coverage and "sampling error" in entry.coverage
    planned = plan_release(weighted, PrivacyLoss.pure(Fraction(1)), ProtectedChange.ADD_REMOVE)
    (stated,) = planned.statistics
    assert stated.quantiles is not None
    assert stated.quantiles[0].rank_error95 == value.rank_error95


def test_every_face_of_the_plan_states_a_weighted_quantiles_delta_and_error_in_weight(
    tmp_path,
) -> None:
    """`dp.plan` (text and HTML) and `dprelease plan` (table and --json) on a spec with a
    weighted median beside an unweighted one: the weighted one's Δ and 95% errors are said in
    weight, never in ranks (a row moves them by up to W = 100, not by one), the unweighted
    one's in ranks as before."""
    import json

    import yaml

    import dprelease as dp

    plain = {**MEDIAN, "name": "plain"}
    spec = {**BASE, "statistics": [{**MEDIAN, "survey_weight": WEIGHT}, plain]}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({"release": spec}))
    planned = dp.plan(spec, epsilon=1)
    weighted, unweighted = planned.statistics
    assert (weighted.weighted_by, unweighted.weighted_by) == ("w", None)
    assert (weighted.rank_unit, unweighted.rank_unit) == ("weight", "ranks")
    lines = {line.split()[0]: line for line in str(planned).splitlines()[2:]}
    assert lines["mid"].endswith("p = 0.5: 3118 weight") and "100 weight" in lines["mid"]
    assert "ranks" not in lines["mid"] and lines["plain"].endswith("ranks")
    assert "100 weight" in planned._repr_html_() and "3118 weight" in planned._repr_html_()
    assert "weighted_by" not in planned.model_dump(mode="json")["statistics"][1]
    args = ["plan", "--spec", str(tmp_path / "spec.yaml"), "--epsilon", "1"]
    shown = invoke_cli(*args, columns=160)
    assert shown.exit_code == 0, shown.output
    row = next(line for line in shown.output.splitlines() if line.split()[:2] == ["mid", "median"])
    assert "100 weight" in row and "weight ↓" in row and "ranks" not in row
    assert "quantiles: 95% errors in ranks, or in weight (Σ w) where survey-weighted" in words(
        shown.output
    )
    quantile_rows = [line.split() for line in shown.output.splitlines() if " 0.5 " in line][:2]
    assert [row[0] for row in quantile_rows] == ["mid", "plain"]
    assert quantile_rows[0][4::2] == ["weight", "weight"]
    assert quantile_rows[1][4::2] == ["ranks", "ranks"]
    as_json = json.loads(invoke_cli(*args, "--json").stdout)
    assert as_json["statistics"][0]["weighted_by"] == "w"


def test_a_weighted_median_without_w_is_refused_in_one_line_naming_the_field(tmp_path) -> None:
    """`dprelease plan` on a spec whose median names a weight column but no W: one line,
    the YAML path of the missing field."""
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(
        "release:\n  name: t\n  source: t\n  statistics:\n"
        "    - {name: mid, kind: median, column: x, lower: 0, upper: 9, resolution: 1,\n"
        "       survey_weight: {column: w}}\n"
    )
    line = one_line_error(invoke_cli("plan", "--spec", str(spec_file), "--epsilon", "1"))
    assert "release.statistics[0].survey_weight.upper" in line


def test_the_weighted_median_is_the_weighted_one_through_a_release() -> None:
    """Heavy weights on the large values: at ε = 8 on 4,000 rows a cell, the released median is
    the weighted median's grid point (within one step) and not the unweighted one's."""
    rng = np.random.default_rng(9)
    n = 8000
    g = rng.integers(0, 2, n)
    x = rng.uniform(0, 100, n).round()
    w = np.where(x > 50, 30.0, 1.0)  # three quarters of the weight above 50
    data = pl.DataFrame({"pid": np.arange(n), "g": np.where(g == 0, "a", "b"), "x": x, "w": w})
    spec = make_spec(BASE | {"max_rows_per_unit": 1}, statistics=[MEDIAN], survey_weight=WEIGHT)
    table = draw_release(data, spec, 8, noise=NoiseSource.seeded_for_tests(3)).table
    for cell, released in zip(("a", "b"), table["mid"].to_list(), strict=True):
        mask = data["g"].to_numpy() == cell
        order = np.argsort(x[mask])
        cum = np.cumsum(w[mask][order])
        weighted = x[mask][order][np.searchsorted(cum, cum[-1] / 2)]
        assert abs(released - weighted) <= 1 and abs(released - np.median(x[mask])) > 10


def test_a_cell_of_more_than_two_to_the_31_weight_steps_is_summed_exactly(tmp_path) -> None:
    """30,000 rows of weight W = 80,000 at a step of 1: 2.4e9 steps on one grid point, past
    Int32, in which a row's steps are held (polars would sum them in Int32 and wrap)."""
    rows = 30_000
    data = pl.DataFrame({"x": np.full(rows, 5.0), "w": np.full(rows, 80_000.0)})
    path = tmp_path / "big.parquet"
    data.write_parquet(path)
    loaded = make_spec(
        {"name": "t", "source": "t"},
        statistics=[MEDIAN],
        survey_weight={"column": "w", "upper": 80_000},
    )
    allocation = allocation_of(loaded)
    (median,) = allocation.quantiles
    assert (median.plan.mass_unit, median.plan.mass_per_row) == (1, 80_000)
    exact = get_engine("polars").aggregate(EngineJob(path, loaded, allocation, None), new_salt())
    histogram = exact.histograms["mid"]
    assert histogram.rows() == [(0, 5, rows * 80_000)]
