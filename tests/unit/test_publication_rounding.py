"""Rounding to a base (`postprocess.round_to`): every released count and sum to an adjacent
multiple of the base, every released margin still the sum of its rounded cells, each value
unbiased; the coins come from the release's noise source."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dprelease.mechanism.noise import NoiseSource, UniformIntegers
from dprelease.publication import round_to_base
from dprelease.publication._rounding import chains
from dprelease.spec import Levels


def grid(**sizes: int) -> pl.DataFrame:
    """The full key grid of the given column sizes, first column slowest."""
    frame = pl.DataFrame()
    for name, size in sizes.items():
        column = pl.DataFrame({name: list(range(size))})
        frame = column if frame.width == 0 else frame.join(column, how="cross")
    return frame


def table_of(levels: Levels, cells: list[int]) -> list[int]:
    """A consistent table: the cells, then each margin's rows as sums of them."""
    return [int(v) for level in levels.aggregate(np.array(cells, dtype=np.int64)) for v in level]


def check_rounded(levels: Levels, values: list[int], base: int, seed: int) -> list[Decimal]:
    rounded = round_to_base(
        values, base, levels, UniformIntegers(NoiseSource.seeded_for_tests(seed))
    )
    assert rounded.additive
    out = rounded.values
    assert len(out) == len(values)
    for before, after in zip(values, out, strict=True):
        assert after % base == 0  # a multiple of the base
        assert abs(after - before) < base  # adjacent: ⌊x⌋ or ⌈x⌉ in units of the base
        assert abs(after - before) <= rounded.max_move
    cells = np.array([int(v) for v in out[: levels.n_cells]], dtype=np.int64)
    assert table_of(levels, list(cells)) == [int(v) for v in out]  # margins sum their cells
    return out


SHAPES = [
    ({"a": 4, "b": 5}, [["a"], ["b"], []]),  # two-way with both margins and the total
    ({"a": 3, "b": 4}, [["a"], ["b"]]),  # two-way without the total
    ({"a": 2, "b": 3, "c": 3}, [["a", "b"], ["a"], [], ["c"]]),  # a nested chain and a crossing one
    ({"a": 6}, [[]]),  # one-way with its total
    ({"a": 3, "b": 2, "c": 2}, [["a", "b"], ["a"], ["c"]]),  # nested chain, total left out
]


@settings(max_examples=60, deadline=None)
@given(
    shape=st.sampled_from(range(len(SHAPES))),
    data=st.data(),
    base=st.sampled_from([5, 10, 3, 100]),
    seed=st.integers(0, 2**32),
)
def test_base_rounding_keeps_every_margin_the_sum_of_its_cells(
    shape: int, data: st.DataObject, base: int, seed: int
) -> None:
    sizes, margins = SHAPES[shape]
    levels = Levels.build(grid(**sizes), margins)
    cells = data.draw(
        st.lists(st.integers(0, 500), min_size=levels.n_cells, max_size=levels.n_cells)
    )
    check_rounded(levels, table_of(levels, cells), base, seed)


def test_decimal_values_round_exactly_and_stay_additive() -> None:
    """Sums published at a decimal place: the walk runs in exact integers of that place."""
    levels = Levels.build(grid(a=3, b=3), [["a"], ["b"], []])
    rng = np.random.default_rng(1)
    tenths = rng.integers(0, 10_000, levels.n_cells)  # values with one decimal
    sums = [level / 10 for level in levels.aggregate(tenths.astype(float))]
    values = [float(v) for level in levels.aggregate(tenths) for v in level / 10]
    assert len(values) == sum(level.size for level in sums)
    rounded = round_to_base(values, 5, levels, UniformIntegers(NoiseSource.seeded_for_tests(2)))
    cells = rounded.values[: levels.n_cells]
    assert all(v % 5 == 0 for v in rounded.values)
    totals = [
        sum(cells[i] for i in range(levels.n_cells) if levels.index[1][i] == r) for r in range(3)
    ]
    assert totals == rounded.values[levels.n_cells : levels.n_cells + 3]
    assert rounded.max_move == Decimal("4.9")  # less than the base, by the place 0.1


def test_values_already_multiples_of_the_base_do_not_move() -> None:
    levels = Levels.build(grid(a=2, b=2), [["a"], []])
    values = table_of(levels, [10, 20, 30, 40])
    rounded = round_to_base(values, 5, levels, UniformIntegers(NoiseSource.seeded_for_tests(3)))
    assert [int(v) for v in rounded.values] == values
    assert rounded.max_move == 0  # so the margins of error gain nothing


def test_each_value_is_unbiased() -> None:
    """E[rounded] = value, cell and margin alike. 2,000 roundings of one table with seeded
    coins: each mean within 4.5 standard errors of its value (the rounding's variance is at most
    base²/4 per draw), a false alarm rate below 1e-4 over the 12 values."""
    levels = Levels.build(grid(a=2, b=3), [["a"], ["b"], []])
    values = table_of(levels, [1, 2, 3, 6, 7, 13])
    uniform = UniformIntegers(NoiseSource.seeded_for_tests(4))
    draws = np.array(
        [[int(v) for v in round_to_base(values, 5, levels, uniform).values] for _ in range(2_000)]
    )
    spread = draws.std(axis=0) / np.sqrt(len(draws))
    assert np.all(
        np.abs(draws.mean(axis=0) - values) <= 4.5 * np.maximum(spread, 2.5 / np.sqrt(2_000))
    )
    assert np.all(draws.min(axis=0) >= np.array(values) - 4)
    assert np.all(draws.max(axis=0) <= np.array(values) + 4)


def test_without_margins_each_value_rounds_alone_unbiased() -> None:
    values = [0, 1, 2, 3, 4, 7, 1234]
    uniform = UniformIntegers(NoiseSource.seeded_for_tests(5))
    draws = np.array(
        [[int(v) for v in round_to_base(values, 5, None, uniform).values] for _ in range(4_000)]
    )
    assert set(np.unique(draws % 5)) == {0}
    # P(up) = remainder / 5: 1 rounds up a fifth of the time, 4 four fifths
    up = (draws > np.array(values)).mean(axis=0)
    assert up[1] == pytest.approx(0.2, abs=0.03) and up[4] == pytest.approx(0.8, abs=0.03)
    assert draws.mean(axis=0) == pytest.approx(values, abs=0.25)


def test_the_coins_are_the_noise_sources() -> None:
    """Same seed, same rounding; the zero source's coins always say 0 (up where any room)."""
    levels = Levels.build(grid(a=3, b=3), [["a"], ["b"], []])
    values = table_of(levels, [1, 2, 3, 4, 5, 6, 7, 8, 9])
    first = round_to_base(values, 5, levels, UniformIntegers(NoiseSource.seeded_for_tests(6)))
    again = round_to_base(values, 5, levels, UniformIntegers(NoiseSource.seeded_for_tests(6)))
    assert first.values == again.values
    zero = round_to_base(values, 5, levels, UniformIntegers(NoiseSource.zero_for_tests()))
    assert zero.additive and all(v % 5 == 0 for v in zero.values)


def test_a_table_whose_margins_do_not_add_up_rounds_each_value_and_says_so() -> None:
    levels = Levels.build(grid(a=2), [[]])
    rounded = round_to_base([1, 2, 4], 5, levels, UniformIntegers(NoiseSource.seeded_for_tests(7)))
    assert not rounded.additive
    assert all(v % 5 == 0 for v in rounded.values)


def test_margins_split_into_two_nested_chains() -> None:
    levels = Levels.build(grid(a=2, b=2, c=2), [["a"], ["c"], ["a", "b"], []])
    first, second = chains(levels)
    for chain in (first, second):
        columns = [set(levels.columns[k]) for k in chain]
        assert all(x <= y for x, y in zip(columns, columns[1:], strict=False))  # coarsest first
    assert sorted(first + second) == [1, 2, 3, 4]
    crossed = Levels.build(grid(a=2, b=2, c=2), [["a"], ["b"], ["c"]])
    with pytest.raises(ValueError, match="three or more directions"):
        chains(crossed)
