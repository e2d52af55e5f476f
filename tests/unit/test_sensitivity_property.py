"""The published Δ bounds what one privacy unit can move, for every spec and every data, in L1
(Laplace noise) and in L2 (Gaussian noise).

For random specs (grouped or not, with or without margins, every combination of contribution
bounds, counts, sums and means, unweighted or with survey weights on the release or per
statistic, both neighbour definitions) and random neighbouring datasets (one unit's rows added
or removed; under substitution, replaced), the exact pre-noise aggregates move by at most the
sensitivity the manifest publishes, in L1 over the key grid, for every measurement — and, with
margins, over every level's rows by at most that level's Δ.

The salt of the contribution bounding is fixed per example: for a fixed salt the rows a unit
keeps must depend on that unit's rows alone (never on file order or other units), which is what
makes the comparison meaningful. The neighbour's rows are inserted at random positions.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import polars as pl
from helpers import prepare_release
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dprelease.change import ProtectedChange
from dprelease.loss import Mechanism, PrivacyLoss
from dprelease.mechanism import allocate
from dprelease.mechanism.engines import EngineJob, get_engine
from dprelease.mechanism.margins import level_sums
from dprelease.mechanism.quantiles._release import _cumulative, _value_scores
from dprelease.spec import parse_spec

GAUSS = Mechanism.GAUSSIAN
UNITS = [0, 1, None, None]  # the neighbour is unit 5, substituted by unit 6 (or 5 again)
REGIONS = ["a", "b", "c"]
#: Mostly in-domain keys, so units have rows in several groups; some null or outside the domain.
REGION_VALUES = [*REGIONS, *REGIONS, "z", None]
AGE_VALUES = [0, 1, 2, 0, 1, 2, 3, None]
BOUNDS = [(0, 10), (-5, 5), (2, 7), (-8, -1)]
VALUES = st.one_of(
    st.floats(-20, 20, allow_nan=False),
    st.sampled_from([None, math.nan, math.inf, -math.inf, 0.0, 2.25, 7.0]),
)
#: Survey weights: within and beyond every declared W, negative, null, NaN and ±inf.
WEIGHTS = st.one_of(
    st.floats(-2, 6, allow_nan=False),
    st.sampled_from([None, math.nan, math.inf, -math.inf, 0.0, 0.5, 2.5, 1e9]),
)
SURVEY_WEIGHTS = st.one_of(
    st.none(), st.builds(dict, column=st.just("w"), upper=st.sampled_from([1, 2.5, 4]))
)


@st.composite
def statistics(draw: st.DrawFn) -> list[dict[str, Any]]:
    stats = []
    for index in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["count", "sum", "mean", "quantile", "median"]))
        stat: dict[str, Any] = {"name": f"s{index}", "kind": kind}
        if kind in ("quantile", "median"):
            lower, upper = draw(st.sampled_from(BOUNDS))
            stat.update(column="v", lower=lower, upper=upper)
            stat["resolution"] = draw(st.sampled_from([0.5, 1.0]))
            if kind == "quantile":
                stat["p"] = draw(st.sampled_from([[0.5], [0.25, 0.5, 0.75], [0.1, 0.9]]))
        elif kind != "count":
            lower, upper = draw(st.sampled_from(BOUNDS))
            stat.update(column="v", lower=lower, upper=upper)
            granularity = draw(st.sampled_from([None, 0.5, 1.0]))
            if granularity is not None:
                stat["granularity"] = granularity
        if (weight := draw(SURVEY_WEIGHTS)) is not None:  # a quantile's: weighted ranks
            stat["survey_weight"] = weight
        stats.append(stat)
    return stats


@st.composite
def specs(draw: st.DrawFn) -> tuple[dict[str, Any], bool]:
    """A valid spec, and whether it has a privacy unit."""
    group_by = [
        {"column": "region", "domain": {"values": REGIONS}},
        {"column": "age", "domain": {"min": 0, "max": 2}},
    ][: draw(st.integers(0, 2))]
    spec: dict[str, Any] = {
        "name": "p",
        "source": "p",
        "group_by": group_by,
        "statistics": draw(statistics()),
        "neighbours": draw(st.sampled_from(["add_remove", "substitute"])),
    }
    quantiles = any(s["kind"] in ("quantile", "median") for s in spec["statistics"])
    if (weight := draw(SURVEY_WEIGHTS)) is not None:
        spec["survey_weight"] = weight
    if group_by and not quantiles and draw(st.integers(0, 2)) == 0:  # a third: margins are slow
        # any of these margins (two nested chains at most: the spec accepts them all)
        columns = [group["column"] for group in group_by]
        candidates = [[c] for c in columns if len(columns) > 1] + [[]]
        spec["margins"] = [m for m in candidates if draw(st.booleans())]
    with_unit = draw(st.booleans())
    if with_unit:
        spec["privacy_unit"] = "pid"
        small = st.one_of(st.none(), st.integers(1, 3))
        groups = draw(small) if group_by else None
        per_group = draw(small) if group_by else None
        rows = draw(small)
        if rows is None and not (groups and per_group):
            rows = draw(st.integers(1, 4))
        if rows is not None and groups and per_group:
            rows = min(rows, groups * per_group)
        bounds = {
            "max_rows_per_unit": rows,
            "max_groups_per_unit": groups,
            "max_rows_per_group": per_group,
        }
        spec.update({k: v for k, v in bounds.items() if v is not None})
    return spec, with_unit


def rows(unit: st.SearchStrategy[Any], size: tuple[int, int]) -> st.SearchStrategy[list[dict]]:
    row = st.fixed_dictionaries(
        {
            "pid": unit,
            "region": st.sampled_from(REGION_VALUES),
            "age": st.sampled_from(AGE_VALUES),
            "v": VALUES,
            "w": WEIGHTS,
        }
    )
    return st.lists(row, min_size=size[0], max_size=size[1])


def insert(base: list[dict], extra: list[dict], positions: list[int]) -> list[dict]:
    """`extra` spread through `base` at the given positions (so other rows move)."""
    out = list(base)
    for row, position in zip(extra, positions, strict=False):
        out.insert(position % (len(out) + 1), row)
    return out


def frame(data: list[dict]) -> pl.DataFrame:
    schema = {
        "pid": pl.Int64,
        "region": pl.String,
        "age": pl.Int64,
        "v": pl.Float64,
        "w": pl.Float64,
    }
    return pl.DataFrame(data, schema=schema)


def published_sensitivity(manifest: dict[str, Any]) -> dict[str, int]:
    """Δ in units per measurement, as the manifest states it."""
    found = {}
    for entry in manifest["statistics"]:
        if entry["kind"] in ("quantile", "median"):
            continue
        for part in entry.get("measurements", [entry]):
            found[part["name"]] = part["sensitivity_units"]
    return found


def quantile_entries(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in manifest["statistics"] if e["kind"] in ("quantile", "median")}


def score_moves(one: np.ndarray, other: np.ndarray, p: Fraction) -> float:
    """Σ over cells of the largest move of p's score at any grid point, in ranks: what the
    per-cell permute-and-flip draws spend together."""
    first = _value_scores(*_cumulative(one), p)
    second = _value_scores(*_cumulative(other), p)
    return float(np.abs(first - second).max(axis=1).sum()) / (2 * p.denominator)


def dense(histogram: pl.DataFrame, cells: int, bins: int) -> np.ndarray:
    out = np.zeros((cells, bins), dtype=np.int64)
    for row in histogram.iter_rows(named=True):
        out[row["cell"], row["point"]] += row["rows"]
    return out


def published_level_sensitivity(manifest: dict[str, Any]) -> dict[str, list[int]]:
    """Δ in units per measurement and level (the cells first), as the manifest states it."""
    found = {}
    for entry in manifest["statistics"]:
        for part in entry.get("measurements", [entry]):
            found[part["name"]] = [level["sensitivity_units"] for level in part["levels"]]
    return found


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    drawn=specs(),
    epsilon=st.sampled_from([0.3, 1.0, 4.0]),
    base=rows(st.sampled_from(UNITS), (0, 12)),
    mine=rows(st.none(), (1, 6)),
    theirs=rows(st.none(), (0, 6)),
    ids=st.sampled_from([(5, 6), (5, 5), (None, None), (None, None)]),
    positions=st.lists(st.integers(0, 12), min_size=6, max_size=6),
    salt=st.integers(0, 2**64 - 1),
)
def test_neighbouring_aggregates_move_by_at_most_the_published_sensitivity(
    drawn: tuple[dict[str, Any], bool],
    epsilon: float,
    base: list[dict],
    mine: list[dict],
    theirs: list[dict],
    ids: tuple[int | None, int | None],
    positions: list[int],
    salt: int,
) -> None:
    spec, with_unit = drawn
    # the neighbour's records: unit 5, replaced by unit 6 or by other records of unit 5; or a
    # person whose id is missing (such rows must not touch anyone else's allowance)
    mine = [{**row, "pid": ids[0]} for row in mine]
    theirs = [{**row, "pid": ids[1]} for row in theirs]
    if not with_unit:  # each row is a unit: the neighbour is one row
        mine, theirs = mine[:1], theirs[:1]
    substitute = spec["neighbours"] == "substitute"
    assume(with_unit or theirs or not substitute)  # without units, a row replaces a row
    one = frame(insert(base, mine, positions))
    other = frame(insert(base, theirs, positions[::-1]) if substitute else base)
    loaded = parse_spec(spec)
    prepared = prepare_release(one, loaded, epsilon)
    assert prepared.budget.change is ProtectedChange(spec["neighbours"])
    engine = get_engine("polars")
    a = engine.aggregate(EngineJob(one, loaded, prepared.allocation, None), salt)
    b = engine.aggregate(EngineJob(other, loaded, prepared.allocation, None), salt)
    manifest = prepared.manifest.to_json_dict()
    for q in prepared.allocation.quantiles:
        entry = quantile_entries(manifest)[q.statistic.name]
        one_h, other_h = (
            dense(x.histograms[q.statistic.name], loaded.cells, q.grid.bins) for x in (a, b)
        )
        weighted = entry.get("survey_weight")  # a weighted histogram holds weight steps
        step = Fraction(weighted["resolution_exact"]) if weighted else Fraction(1)
        moved = Fraction(weighted["mass_moved_exact"]) / step if weighted else entry["rows_moved"]
        assert np.abs(one_h - other_h).sum() <= moved == q.plan.mass_moved
        for value in entry["quantiles"]:
            p = Fraction(value["p_exact"])
            in_weight = score_moves(one_h, other_h, p) * float(step)
            assert in_weight <= value["score_sensitivity"], (p, q.derivation)
    sensitivity = published_sensitivity(manifest)
    for m in prepared.allocation.measurements:
        moved = (a.of(m) - b.of(m)).abs().sum()
        assert moved <= sensitivity[m.name] == m.sensitivity_units, (m.name, m.derivation)
        if prepared.margins is None:
            continue
        levels = prepared.margins.levels
        published = published_level_sensitivity(manifest)[m.name]
        for k, (x, y, level) in enumerate(
            zip(level_sums(a.of(m), levels), level_sums(b.of(m), levels), m.levels, strict=True)
        ):
            moved = (x - y).abs().sum()
            assert moved <= published[k] == level.sensitivity_units, (m.name, level.derivation)
    # L2, for Gaussian noise: the same neighbours, aggregated in the Gaussian allocation's units
    gaussian = allocate(loaded, PrivacyLoss.zcdp(Fraction(1, 2)), prepared.budget.change, GAUSS)
    a2 = engine.aggregate(EngineJob(one, loaded, gaussian, None), salt)
    b2 = engine.aggregate(EngineJob(other, loaded, gaussian, None), salt)
    for m in gaussian.measurements:
        if loaded.levels is None:
            pairs = [(a2.of(m), b2.of(m))]
        else:
            x_levels = level_sums(a2.of(m), loaded.levels)
            pairs = list(zip(x_levels, level_sums(b2.of(m), loaded.levels), strict=True))
        for (x, y), level in zip(pairs, m.levels, strict=True):
            moved_squared = sum(int(d) ** 2 for d in (x - y).to_list())
            assert level.sensitivity_squared_units is not None
            assert moved_squared <= level.sensitivity_squared_units, (m.name, level.derivation)
