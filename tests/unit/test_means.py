"""Means reuse the release's count and a sum of the same column and bounds; they spend ε only on
what they cannot reuse, and the spec refuses settings that would mean nothing for them."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import polars as pl
import pytest
from helpers import allocation_of, draw_release, make_spec

from dprelease.errors import SpecError
from dprelease.mechanism.noise import NoiseSource
from dprelease.spec import ResolvedSpec

COUNT = {"name": "n", "kind": "count"}
TOTAL = {"name": "total", "kind": "sum", "column": "x", "lower": 0, "upper": 50}
MEAN = {"name": "avg", "kind": "mean", "column": "x", "lower": 0, "upper": 50}


BASE: dict[str, Any] = {
    "name": "t",
    "source": "t",
    "privacy_unit": "pid",
    "max_rows_per_unit": 1,
    "group_by": [{"column": "g", "domain": {"values": ["a", "b"]}}],
}


def spec(*statistics: dict, **overrides: Any) -> ResolvedSpec:
    return make_spec(BASE, statistics=list(statistics), **overrides)


def shares(loaded: ResolvedSpec) -> dict[str, Fraction]:
    return {m.name: m.epsilon for m in allocation_of(loaded).measurements}


def test_a_mean_reusing_a_count_and_a_sum_spends_nothing_and_matches_them() -> None:
    loaded = spec(COUNT, TOTAL, MEAN, postprocess={"nonnegative": False, "decimals": 12})
    assert shares(loaded) == {"n": Fraction(1, 2), "total": Fraction(1, 2)}
    df = pl.DataFrame({"pid": range(40), "g": ["a"] * 30 + ["b"] * 10, "x": [10.0] * 40})
    result = draw_release(df, loaded, 1, noise=NoiseSource.seeded_for_tests(3))
    entry = result.manifest.statistics[2]
    assert entry.kind == "mean"
    assert (entry.epsilon_exact, entry.reuses, entry.measurements) == (
        "0",
        ["total", "n"],
        [],
    )
    table = result.table.filter(pl.col("n") > 0)
    expected = (table["total"] / table["n"]).clip(0, 50)
    assert (table["avg"] - expected).abs().max() < 1e-9  # the published sum / the published count


def test_a_mean_without_a_count_spends_half_its_share_on_a_count_of_its_own() -> None:
    """Issue 14: the budget of a mean without a count statistic."""
    alone = shares(spec(TOTAL | {"column": "y"}, MEAN))
    assert alone == {
        "total": Fraction(1, 2),
        "mean:avg:sum": Fraction(1, 4),
        "mean:avg:count": Fraction(1, 4),
    }
    with_count = shares(spec(COUNT, MEAN))  # reuses the count: its whole share on its sum
    assert with_count == {"n": Fraction(1, 2), "mean:avg:sum": Fraction(1, 2)}
    with_sum = shares(spec(TOTAL, MEAN))  # reuses the sum: its whole share on its count
    assert with_sum == {"total": Fraction(1, 2), "mean:avg:count": Fraction(1, 2)}


@pytest.mark.parametrize(
    "other",
    [
        {"lower": 1},  # other bounds
        {"column": "y"},  # another column
        {"granularity": 1},  # the mean asks for another granularity than the sum's (automatic)
    ],
)
def test_only_a_sum_of_the_same_column_bounds_and_granularity_is_reused(other: dict) -> None:
    mean = MEAN | ({"granularity": 1} if "granularity" in other else {})
    total = TOTAL | ({} if "granularity" in other else other)
    assert "mean:avg:sum" in shares(spec(COUNT, total, mean))


def test_a_weight_on_a_mean_that_spends_nothing_is_refused() -> None:
    with pytest.raises(SpecError) as info:
        spec(COUNT, TOTAL, MEAN | {"weight": 2})
    assert info.value.path == "release.statistics[2].weight"
    assert "spends no ε" in str(info.value)


def test_accuracy_targets_allow_only_means_that_reuse_everything() -> None:
    targeted = [COUNT | {"target_moe95": 5}, TOTAL | {"target_moe95": 100}]
    assert shares(spec(*targeted, MEAN)).keys() == {"n", "total"}
    with pytest.raises(SpecError) as info:
        spec(targeted[0], MEAN)
    assert info.value.path == "release.statistics[1]"
    assert "must reuse a count and a sum" in str(info.value)
