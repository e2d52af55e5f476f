"""Survey weights: weighted counts (Σ w), sums (Σ w·x) and means (Σ w·x / Σ w).

Exact values on small inputs at zero noise, computed by hand from the contract (w clamped to
[0, W], null/NaN/text → 0; x by the nulls rule; w·x rounded to units and clamped); the published
Δ for every neighbour definition, and attained by a unit at the bounds (so it is not loose);
the L2 sensitivity of a weighted level; which count and sum a weighted mean reuses; the spec's
refusals; margins and the planner with weighted statistics.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import polars as pl
import pytest
from helpers import allocation_of, draw_release, make_spec, prepare_release

from dprelease.change import ProtectedChange
from dprelease.errors import SchemaError, SpecError
from dprelease.loss import Mechanism, PrivacyLoss
from dprelease.mechanism import Measurement, allocate
from dprelease.mechanism.engines import EngineJob, get_engine
from dprelease.mechanism.engines.polars import PolarsEngine
from dprelease.spec import ResolvedSpec
from dprelease.statement import epsilon_for_targets, plan
from dprelease.statement._search import _unit

ADD_REMOVE, SUBSTITUTE = ProtectedChange.ADD_REMOVE, ProtectedChange.SUBSTITUTE
W = {"column": "w", "upper": 10}
BASE: dict[str, Any] = {
    "name": "t",
    "source": "t",
    "privacy_unit": "pid",
    "max_rows_per_unit": 3,
    "group_by": [{"column": "g", "domain": {"values": ["a", "b"]}}],
}
COUNT = {"name": "n", "kind": "count"}
TOTAL = {"name": "total", "kind": "sum", "column": "x", "lower": -4, "upper": 8}
MEAN = {"name": "avg", "kind": "mean", "column": "x", "lower": -4, "upper": 8}
EXACT = {"nonnegative": False, "decimals": 9}  # publish every digit a zero-noise release has


def spec(*statistics: dict, **overrides: Any) -> ResolvedSpec:
    return make_spec(BASE, statistics=list(statistics), **overrides)


#: One row per case the contract names, all of group "a" (units 1..9, one row each).
ROWS = pl.DataFrame(
    {
        "pid": range(1, 10),
        "g": ["a"] * 9,
        #    plain big   null  NaN       neg   inf       zero x null x high
        "w": [2.5, 50.0, None, math.nan, -3.0, math.inf, 0.0, 4.0, 1.0],
        "x": [2.0, 1.0, 7.0, 7.0, 7.0, -1.0, 5.0, None, 100.0],
    },
    schema_overrides={"w": pl.Float64, "x": pl.Float64},
)
#: By hand: w → [2.5, 10, 0, 0, 0, 10, 0, 4, 1]; x → [2, 1, 7, 7, 7, -1, 5, 0, 8].
WEIGHTED_COUNT = 2.5 + 10 + 10 + 4 + 1
WEIGHTED_SUM = 2.5 * 2 + 10 * 1 + 10 * -1 + 4 * 0 + 1 * 8


def test_weighted_counts_sums_and_means_are_exact_at_zero_noise() -> None:
    loaded = spec(COUNT, TOTAL, MEAN, survey_weight=W, postprocess=EXACT)
    row = draw_release(ROWS, loaded).table.row(0, named=True)
    assert row["n"] == WEIGHTED_COUNT
    assert row["total"] == WEIGHTED_SUM
    assert row["avg"] == pytest.approx(WEIGHTED_SUM / WEIGHTED_COUNT, abs=1e-9)  # 9 decimals
    assert draw_release(ROWS, loaded).table.row(1, named=True)["n"] == 0  # group "b": no rows


def test_a_weighted_sum_with_bounds_above_zero_adds_nothing_for_a_zero_weight() -> None:
    """[L, U] = [2, 7]: x is clamped to ≥ 2, but w = 0 (null, NaN, negative) still adds 0: the
    product's range is [0, 7W], not [2W, 7W]."""
    loaded = spec(TOTAL | {"lower": 2, "upper": 7}, survey_weight=W, postprocess=EXACT)
    total = draw_release(ROWS, loaded).table.row(0, named=True)["total"]
    assert total == 2.5 * 2 + 10 * 2 + 10 * 2 + 4 * 2 + 1 * 7  # w = 0 rows add nothing
    m = allocation_of(loaded).measurements[0]
    assert m.lower_units == 0 and m.upper_units * m.granularity == 70


def test_weights_are_read_from_text_as_numbers_or_zero(tmp_path) -> None:
    """CSV is text: a weight that parses is a number, anything else counts as 0."""
    path = tmp_path / "rows.csv"
    pl.DataFrame(
        {"pid": [1, 2, 3, 4], "g": ["a"] * 4, "w": ["2.5", "1e1", "lots", ""], "x": [1.0] * 4}
    ).write_csv(path)
    loaded = spec(COUNT, survey_weight=W, postprocess=EXACT)
    assert draw_release(path, loaded).table.row(0, named=True)["n"] == 12.5


def test_a_statistics_own_weight_wins_and_rows_are_counted_without_one() -> None:
    by_x = COUNT | {"name": "by_x", "survey_weight": {"column": "x", "upper": 5}}
    alone = draw_release(ROWS, spec(COUNT, by_x, postprocess=EXACT)).table.row(0, named=True)
    assert alone["n"] == 9 and isinstance(alone["n"], int)  # counted rows stay integers
    assert alone["by_x"] == 2 + 1 + 5 + 5 + 5 + 0 + 5 + 0 + 5  # x clamped to [0, 5], null → 0
    weighted = spec(COUNT, by_x, survey_weight=W, postprocess=EXACT)
    row = draw_release(ROWS, weighted).table.row(0, named=True)
    assert (row["n"], row["by_x"]) == (WEIGHTED_COUNT, alone["by_x"])


def test_weighted_aggregates_do_not_depend_on_partitioning(tmp_path) -> None:
    """A large input is bounded partition by partition (`tests/unit/test_engine_partitions.py`);
    the weighted units are computed row by row before that, so nothing changes: 600 rows of 90
    units (R = 3 truncates), in 15 partitions against none."""
    rows = 600
    table = pl.DataFrame(
        {
            "pid": [(i * 7919) % 90 for i in range(rows)],
            "g": ["a", "b", "z"] * (rows // 3),
            "w": [None if i % 11 == 0 else (i * 37) % 23 / 2 for i in range(rows)],
            "x": [((i * 13) % 17) - 5.5 for i in range(rows)],
        }
    )
    path = tmp_path / "rows.parquet"
    table.write_parquet(path)
    loaded = spec(
        COUNT, TOTAL, MEAN | {"survey_weight": {"column": "x", "upper": 3}}, survey_weight=W
    )
    plan_ = prepare_release(path, loaded).allocation

    def exact(rows_per_partition: int) -> dict[str, list[int]]:
        engine = PolarsEngine(rows_per_partition=rows_per_partition)
        found = engine.aggregate(EngineJob(path, loaded, plan_, None), salt=99)
        return {name: series.to_list() for name, series in found.values.items()}

    whole = exact(rows + 1)
    assert exact(40) == whole and any(any(values) for values in whole.values())


# --------------------------------------------------------------------------- Δ


@pytest.mark.parametrize(
    ("bounds", "largest", "span"), [((0, 8), 8, 8), ((2, 7), 7, 7), ((-4, 8), 8, 12)]
)
@pytest.mark.parametrize("grouped", [True, False])
@pytest.mark.parametrize("change", [ADD_REMOVE, SUBSTITUTE])
def test_the_published_sensitivity_is_the_derivations(
    bounds: tuple[int, int], largest: int, span: int, grouped: bool, change: ProtectedChange
) -> None:
    """R·W for a weighted count and R·W·max(|L|, |U|) for a weighted sum; substitution doubles
    them on a grouped release and replaces rows in place on an ungrouped one (R·W and
    R·W·(max(U, 0) − min(L, 0))): in value units, the granularity declared exactly."""
    lower, upper = bounds
    total = TOTAL | {"lower": lower, "upper": upper, "granularity": 0.5}
    overrides = {} if grouped else {"group_by": []}
    loaded = spec(COUNT, total, survey_weight=W, **overrides)
    count, summed = allocation_of(loaded, 1, change).measurements
    rows, weight = 3, 10
    doubled = 2 if change is SUBSTITUTE and grouped else 1
    in_place = change is SUBSTITUTE and not grouped
    assert count.sensitivity == doubled * rows * weight
    assert summed.sensitivity == (
        rows * weight * span if in_place else doubled * rows * weight * largest
    )
    assert "weighted count" in count.derivation and "clamped to [0, 10]" in count.derivation
    assert (
        "weighted sum" in summed.derivation
        and summed.derivation.endswith(f"= {summed.sensitivity:.10g}")  # in the column's units
    )


@pytest.mark.parametrize("change", [ADD_REMOVE, SUBSTITUTE])
def test_a_unit_at_the_bounds_moves_the_aggregates_by_exactly_delta(
    change: ProtectedChange,
) -> None:
    """Δ is attained, so it is not loose: unit 5 keeps R = 3 of its rows, of weight W at the
    bound of largest magnitude; substituted, by 3 such rows in the other group."""
    loaded = spec(COUNT, TOTAL | {"granularity": 0.5}, survey_weight=W)
    others = pl.DataFrame({"pid": [1, 2], "g": ["a", "b"], "w": [3.0, 1.0], "x": [1.0, -2.0]})
    unit = pl.DataFrame({"pid": [5] * 4, "g": ["a"] * 4, "w": [99.0] * 4, "x": [8.0] * 4})
    other = pl.DataFrame({"pid": [5] * 3, "g": ["b"] * 3, "w": [10.0] * 3, "x": [9.0] * 3})
    one = pl.concat([others, unit])
    neighbour = pl.concat([others, other]) if change is SUBSTITUTE else others
    plan_ = prepare_release(one, loaded, neighbours=change).allocation
    engine = get_engine("polars")
    a, b = (engine.aggregate(EngineJob(df, loaded, plan_, None), salt=7) for df in (one, neighbour))
    for m in plan_.measurements:
        assert int((a.of(m) - b.of(m)).abs().sum()) == m.sensitivity_units, m.name


def gaussian(loaded: ResolvedSpec, change: ProtectedChange) -> list[Measurement]:
    """The measurements of a Gaussian (zCDP) allocation, each with its Δ2² in units²."""
    zcdp = PrivacyLoss.zcdp(Fraction(1, 2))
    return allocate(loaded, zcdp, change, Mechanism.GAUSSIAN).measurements


def test_the_l2_sensitivity_of_weighted_levels_is_the_derivations() -> None:
    """zCDP notes §4.6: with R = 5 and R_g = 2 (C² = a·c² + r² = 2·2² + 1² = 9), a weighted
    count has Δ2 = W·C under add/remove and √2·W·C under substitution, Δ2 = Δ1 = R·W on one row;
    a weighted sum Δ2 = W·max(|L|, |U|)·C: the L2 bounds with the weighted range in units."""
    bounds = {"max_rows_per_unit": 5, "max_rows_per_group": 2}
    loaded = spec(COUNT, TOTAL | {"granularity": 0.5}, survey_weight=W, **bounds)
    count, summed = gaussian(loaded, ADD_REMOVE)
    w_units = count.upper_units
    assert (count.lower_units, w_units * count.granularity) == (0, 10)
    assert count.sensitivity_squared_units == w_units**2 * 9
    assert (summed.lower_units, summed.upper_units) == (-80, 160)  # W·[−4, 8] in units of 0.5
    assert summed.sensitivity_squared_units == 160**2 * 9
    count, summed = gaussian(loaded, SUBSTITUTE)
    assert count.sensitivity_squared_units == 2 * count.upper_units**2 * 9
    ungrouped = spec(COUNT, survey_weight=W, group_by=[], max_rows_per_unit=5)
    (count,) = gaussian(ungrouped, SUBSTITUTE)
    assert count.sensitivity_squared_units == (5 * count.upper_units) ** 2


# --------------------------------------------------------------------------- means and the spec


def test_a_weighted_mean_reuses_only_a_count_and_a_sum_weighted_as_it_is() -> None:
    other = {"column": "v", "upper": 3}
    loaded = spec(
        COUNT,
        COUNT | {"name": "n2", "survey_weight": W},
        TOTAL,
        TOTAL | {"name": "total2", "survey_weight": W},
        MEAN | {"survey_weight": W},
        MEAN | {"name": "avg2", "survey_weight": other},
    )
    reuse = [loaded.spec.reuse_of(s) for s in loaded.spec.statistics[4:]]
    assert (reuse[0].count, reuse[0].sum) == ("n2", "total2")
    assert (reuse[1].count, reuse[1].sum) == (None, None)
    own = {m.name: m for m in allocation_of(loaded).measurements}
    count, total = own["mean:avg2:count"], own["mean:avg2:sum"]
    assert count.survey_weight is not None and total.survey_weight is not None
    assert count.survey_weight.column == total.survey_weight.column == "v"
    assert count.kind.value == "count" and not count.counts_rows


@pytest.mark.parametrize(
    ("weight", "message"),
    [
        ({"column": "w", "upper": 0}, r"release\.survey_weight\.upper: .*greater than 0"),
        ({"column": "w", "upper": math.inf}, r"release\.survey_weight\.upper: .*finite"),
        ({"column": "w", "upper": 2.0**60}, r"release\.survey_weight\.upper: .*at most 2\^53"),
        ({"column": "w"}, r"release\.survey_weight\.upper: .*required"),
        (
            {"column": "w", "upper": 1, "lower": 0},
            r"release\.survey_weight\.lower: .*not permitted",
        ),
    ],
)
def test_a_bad_survey_weight_is_refused_at_its_path(weight: dict, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        spec(COUNT, survey_weight=weight)


MEDIAN = {"name": "mid", "kind": "median", "column": "x", "lower": -4, "upper": 8, "resolution": 1}


def test_a_weight_applies_to_a_quantile_and_its_step_is_refused_without_one() -> None:
    """A quantile under a weight is the weighted quantile (tests/unit/test_weighted_quantiles.py);
    a weight resolution without a weight, or leaving W outside 1 … 2^20 steps, is refused."""
    own = MEDIAN | {"survey_weight": W}
    for loaded in (spec(COUNT, MEDIAN, survey_weight=W), spec(COUNT, own)):
        (median,) = allocation_of(loaded).quantiles
        assert median.weight is not None and median.weight.upper == 10
    (plain,) = allocation_of(spec(COUNT | {"survey_weight": W}, MEDIAN)).quantiles
    assert plain.weight is None  # weighted counts beside an unweighted median
    with pytest.raises(SpecError, match=r"statistics\[1\]\.weight_resolution: 'mid' is not"):
        spec(COUNT, MEDIAN | {"weight_resolution": 1})
    with pytest.raises(SpecError, match=r"statistics\[1\]\.weight_resolution: W = 10 is 0"):
        spec(COUNT, MEDIAN | {"weight_resolution": 40}, survey_weight=W)
    with pytest.raises(SpecError, match=r"statistics\[1\]\.survey_weight\.upper: .*required"):
        spec(COUNT, MEDIAN | {"survey_weight": {"column": "w"}})


def test_the_spec_hash_changes_with_a_weight_and_not_without_one() -> None:
    plain = spec(COUNT, TOTAL)
    assert "survey_weight" not in plain.spec.canonical_json()
    weighted = spec(COUNT, TOTAL, survey_weight=W)
    per_statistic = spec(COUNT | {"survey_weight": W}, TOTAL)
    assert len({plain.hash, weighted.hash, per_statistic.hash}) == 3
    assert weighted.spec.to_yaml().count("survey_weight") == 1
    assert make_spec(BASE, **weighted.spec.model_dump(mode="json")).hash == weighted.hash


def test_a_weight_column_must_be_numeric_and_is_named_with_its_path() -> None:
    loaded = spec(COUNT | {"survey_weight": W})
    text = ROWS.with_columns(pl.col("w").cast(pl.String))
    with pytest.raises(
        SchemaError,
        match=r"^release\.statistics\[0\]\.survey_weight\.column: column 'w': has dtype String "
        "but a survey weight needs a numeric column$",
    ):
        prepare_release(text, loaded)
    with pytest.raises(
        SchemaError, match=r"^release\.survey_weight\.column: column 'w': not found"
    ):
        prepare_release(ROWS.drop("w"), spec(COUNT, survey_weight=W))


# --------------------------------------------------------------------------- margins, planner


def test_weighted_margins_add_up_and_are_rounded_as_sums() -> None:
    loaded = spec(
        COUNT,
        TOTAL,
        MEAN,
        survey_weight=W,
        margins=[[]],
        postprocess={"nonnegative": False},
    )
    df = pl.concat([ROWS, ROWS.with_columns(g=pl.lit("b"), pid=pl.col("pid") + 100)])
    table = draw_release(df, loaded).table
    cells, total = table.filter(pl.col("level") == "g"), table.filter(pl.col("level") == "total")
    for name in ("n", "total"):
        assert math.isclose(cells[name].sum(), total[name].item(), abs_tol=1e-9)
    assert table.schema["n"] == pl.Float64  # a weighted count is a decimal, as a sum is
    stated = {s.name: s for s in prepare_release(df, loaded).manifest.statistics}
    assert stated["n"].survey_weight is not None and stated["n"].survey_weight.upper == 10
    levels = stated["n"].levels
    assert levels is not None and [level.sensitivity for level in levels] == [30, 30]


def test_the_plan_of_a_weighted_release_is_its_manifest() -> None:
    loaded = spec(COUNT, TOTAL, MEAN, survey_weight=W)
    planned = plan(loaded, PrivacyLoss.pure(Fraction(1, 3)), ADD_REMOVE)
    manifest = prepare_release(ROWS, loaded, Fraction(1, 3)).manifest
    stated = {s.name: s for s in manifest.statistics}
    for row in planned.statistics:
        if row.kind != "mean":
            entry = stated[row.name]
            assert (row.sensitivity, row.scale, row.moe95, row.derivation) == (
                entry.sensitivity,
                entry.noise_scale,
                entry.moe95,
                entry.derivation,
            )
    assert planned.statistics[0].sensitivity == 30  # R·W


def test_the_smallest_epsilon_for_weighted_targets_is_exact() -> None:
    """Targets on a weighted count and a weighted sum (automatic granularity): the ε found
    meets them, one step of six significant digits below does not."""
    loaded = spec(
        COUNT | {"target_moe95": 200},
        TOTAL | {"target_moe95": 900},
        survey_weight=W,
    )
    found = epsilon_for_targets(loaded, {"n": 200, "total": 900}, ADD_REMOVE)
    at = {p.statistic.name: p.measurement.moe95 for p in allocation_of(loaded, found).statistics}
    assert at["n"] <= 200 and at["total"] <= 900
    below = allocation_of(loaded, found - _unit(found)).statistics
    assert any(p.measurement.moe95 > p.statistic.target_moe95 for p in below)  # type: ignore[union-attr]


# --------------------------------------------------------------------------- the guide's claim


def coverage(half_width: float, laplace_scale: float, normal_sd: float) -> float:
    """P(|X + Y| ≤ half_width) for X ~ Laplace(laplace_scale) and Y ~ N(0, normal_sd²),
    independent, by numerical integration over X."""
    from scipy import integrate, stats

    def inside(x: float) -> float:
        density = math.exp(-abs(x) / laplace_scale) / (2 * laplace_scale)
        upper = stats.norm.cdf((half_width - x) / normal_sd)
        return float(density * (upper - stats.norm.cdf((-half_width - x) / normal_sd)))

    reach = 60 * laplace_scale + 10 * half_width
    return float(integrate.quad(inside, -reach, reach, points=[0.0], limit=500)[0])


def test_margins_added_in_quadrature_cover_laplace_noise_plus_normal_sampling_error() -> None:
    """The guide (section 7): √(moe_privacy² + moe_sampling²) covers at least 95% when the
    privacy noise is Laplace and the sampling error normal, whatever their ratio, while
    1.96·√(summed variances) covers down to 93.8% (Laplace's heavier tails)."""
    laplace_moe = math.log(20)  # Laplace(1): P(|X| ≤ ln 20) = 0.95
    quadrature, normal = [], []
    for ratio in (0.05, 0.1, 0.3, 1.0, 3.0, 10.0, 20.0):
        sd = ratio * laplace_moe / 1.96
        quadrature.append(coverage(math.hypot(laplace_moe, 1.96 * sd), 1.0, sd))
        normal.append(coverage(1.96 * math.sqrt(2 + sd * sd), 1.0, sd))
    assert all(0.95 - 1e-6 <= c <= 0.956 for c in quadrature), quadrature
    assert min(normal) < 0.939 and max(normal) < 0.9501, normal


def test_unit_bounds_beyond_two_to_the_53_are_refused_with_their_sensitivity() -> None:
    """W·U = 3·(2^52 + 1) units is not exact in float64, where the engine clamps a row's units.
    No release reaches it: a row's bound in units is at most Δ, and a Δ above 2^53 is refused
    before anything is read or charged."""
    upper = 2**52 + 1
    stat = {"name": "total", "kind": "sum", "column": "x", "lower": 0, "upper": upper}
    loaded = spec(
        stat | {"granularity": 1}, survey_weight={"column": "w", "upper": 3}, max_rows_per_unit=1
    )
    with pytest.raises(SpecError, match=r"release\.statistics\[0\]: sensitivity of .* above 2\^53"):
        allocation_of(loaded, 64)
