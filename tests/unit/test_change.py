"""The protected change and the one reach rule every sensitivity starts from."""

from __future__ import annotations

from fractions import Fraction

import pytest
from helpers import make_spec

from dprelease.change import ProtectedChange, UnitBounds, reach
from dprelease.loss import PrivacyLoss
from dprelease.mechanism import allocate

ADD, SUB = ProtectedChange.ADD_REMOVE, ProtectedChange.SUBSTITUTE


@pytest.mark.parametrize(
    ("change", "moves", "rows"), [(ADD, False, 3), (ADD, True, 3), (SUB, False, 3), (SUB, True, 6)]
)
def test_substitution_doubles_the_rows_only_where_they_can_move(
    change: ProtectedChange, moves: bool, rows: int
) -> None:
    assert reach(change, 3, moves=moves) == rows


def test_the_bounds_say_why_in_the_words_a_derivation_starts_with() -> None:
    assert UnitBounds(rows=1, unit=False).why == "each row is a privacy unit: one unit is 1 row"
    product = UnitBounds(rows=6, groups=2, rows_per_group=3, declared=False)
    assert product.why == (
        "one unit keeps at most 6 row(s) (max_rows_per_unit defaults to 2 group(s) × 3 row(s) "
        "per group)"
    )
    assert UnitBounds(rows=4).reach(SUB, "(possibly in other groups)") == (
        8,
        "one unit keeps at most 4 row(s) (max_rows_per_unit); substitution removes those rows "
        "and adds as many (possibly in other groups): ×2",
    )
    assert UnitBounds(rows=4).reach(SUB, None) == (4, UnitBounds(rows=4).why)


@pytest.mark.parametrize("change", [ADD, SUB])
@pytest.mark.parametrize("grouped", [True, False])
def test_counts_and_quantiles_state_the_reach_their_noise_is_calibrated_to(
    change: ProtectedChange, grouped: bool
) -> None:
    """A count's Δ and a quantile's rows moved come from the same rule, so the number a
    manifest states is the one the noise uses (with no assertion to keep them equal)."""
    median = {"name": "m", "kind": "median", "column": "v", "lower": 0, "upper": 9,
              "resolution": 1}  # fmt: skip
    group_by = [{"column": "g", "domain": {"values": ["a", "b"]}}] if grouped else []
    spec = make_spec(
        privacy_unit="pid", max_rows_per_unit=3, group_by=group_by,
        statistics=[{"name": "n", "kind": "count"}, median],
    )  # fmt: skip
    count, quantile = allocate(spec, PrivacyLoss.pure(Fraction(1)), change).statistics
    assert count.measurement.sensitivity_units == reach(change, 3, moves=grouped)
    assert quantile.plan.rows_moved == reach(change, 3, moves=True)
    assert f"→ {quantile.plan.rows_moved} row(s) moved" in quantile.derivation
