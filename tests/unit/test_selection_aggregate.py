"""The reference aggregate of key selection (units per candidate key and keys held), against a
row-by-row count, and the property the guarantee rests on: adding one unit changes the table by
that unit's own contribution only, at most G keys, each by one unit in the column of its g."""

from __future__ import annotations

import collections

import numpy as np
import polars as pl
import pytest

from dprelease.mechanism.selection import released_keys, units_per_key


def random_rows(seed: int, units: int = 60, rows: int = 400, keys: int = 25) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    return pl.DataFrame(
        {
            "person": rng.integers(0, units, rows),
            "dx": [f"K{k:02d}" for k in rng.zipf(1.5, rows) % keys],
        }
    )


def reference(frame: pl.DataFrame, g: int) -> dict[str, collections.Counter]:
    """Row by row, with no bound that binds (G ≥ every unit's keys)."""
    held: dict[int, set[str]] = collections.defaultdict(set)
    for person, key in frame.iter_rows():
        held[person].add(key)
    table: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for keys in held.values():
        for key in keys:
            table[key][len(keys)] += 1
    return table


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_without_a_binding_bound_it_is_the_row_by_row_count(seed: int) -> None:
    frame = random_rows(seed)
    big = 25
    candidates, table = units_per_key(frame, "person", ["dx"], big, salt=7)
    expected = reference(frame, big)
    assert candidates["dx"].to_list() == sorted(expected)
    for key, row in zip(candidates["dx"].to_list(), table, strict=True):
        assert {g + 1: int(c) for g, c in enumerate(row) if c} == dict(expected[key])


@pytest.mark.parametrize("g", [1, 2, 3])
def test_each_unit_counts_towards_at_most_g_keys(g: int) -> None:
    frame = random_rows(4)
    _, table = units_per_key(frame, "person", ["dx"], g, salt=11)
    per_unit = frame.unique().group_by("person").len()["len"].to_numpy()
    kept = np.minimum(per_unit, g)
    assert int(table.sum()) == int(kept.sum())  # one entry per kept (unit, key)
    # units that kept h keys appear h times in column h
    for h in range(1, g + 1):
        assert int(table[:, h - 1].sum()) == h * int((kept == h).sum())


@pytest.mark.parametrize("g", [1, 3])
def test_adding_one_unit_moves_only_its_own_kept_keys(g: int) -> None:
    """Neighbouring datasets under add/remove: the difference of the tables is the added unit's
    row: at most G keys, each +1 in the column of the number it kept (same salt)."""
    frame = random_rows(5)
    extra = pl.DataFrame({"person": [999] * 6, "dx": ["K01", "K02", "K03", "NEW1", "NEW2", "K01"]})
    keys_a, table_a = units_per_key(frame, "person", ["dx"], g, salt=3)
    keys_b, table_b = units_per_key(pl.concat([frame, extra]), "person", ["dx"], g, salt=3)
    a = {k: table_a[i] for i, k in enumerate(keys_a["dx"].to_list())}
    b = {k: table_b[i] for i, k in enumerate(keys_b["dx"].to_list())}
    zero = np.zeros(g, dtype=np.int64)
    moved = {k: b.get(k, zero) - a.get(k, zero) for k in set(a) | set(b)}
    moved = {k: d for k, d in moved.items() if d.any()}
    kept = min(g, 5)
    assert len(moved) == kept
    for diff in moved.values():
        assert diff.tolist() == [1 if h == kept else 0 for h in range(1, g + 1)]


def test_always_keys_and_nulls_are_no_candidates_and_keys_come_sorted() -> None:
    frame = pl.DataFrame(
        {"person": [1, 1, 2, 3, None], "dx": ["b", "a", None, "c", "d"]},
        schema={"person": pl.Int64, "dx": pl.String},
    )
    always = pl.DataFrame({"dx": ["c", "z"]})
    candidates, table = units_per_key(frame, "person", ["dx"], 2, salt=1, always=always)
    assert candidates["dx"].to_list() == ["a", "b"]
    assert table.tolist() == [[0, 1], [0, 1]]
    shown = released_keys(candidates, np.array([False, True]), always)
    assert shown["dx"].to_list() == ["b", "c", "z"]


def test_joint_keys() -> None:
    frame = pl.DataFrame({"person": [1, 1, 2], "a": ["x", "x", "y"], "b": [1, 2, 1]})
    candidates, table = units_per_key(frame, "person", ["a", "b"], 2, salt=1)
    assert candidates.rows() == [("x", 1), ("x", 2), ("y", 1)]
    assert table.tolist() == [[0, 1], [0, 1], [1, 0]]
    candidates, table = units_per_key(frame, "person", ["a", "b"], 1, salt=1)
    assert ("y", 1) in candidates.rows() and candidates.height == 2
    assert table.tolist() == [[1], [1]]


def test_real_microdata_zinc_levels_of_nhanes() -> None:
    """NHANES II (docs/data/nhanes2.csv, 10 337 people): which serum zinc levels may be shown,
    with no list of levels given. ε = 1, δ = 1e-9: τ = 21. The levels held by one person (the
    extremes 43 and 240 among them) are not released; every level held by enough people to be
    certain is; the number released is within 5 standard deviations of its exact expectation
    (false-alarm rate ≈ 6e-7; seed fixed)."""
    from fractions import Fraction

    from helpers import ROOT

    from dprelease.loss import PrivacyLoss
    from dprelease.mechanism.noise import NoiseSource
    from dprelease.mechanism.selection import keep_table, plan_selection

    people = pl.read_csv(ROOT / "docs" / "data" / "nhanes2.csv").with_row_index("person")
    candidates, table = units_per_key(people, "person", ["zinc"], 1, salt=2024)
    plan = plan_selection(PrivacyLoss.pure(Fraction(1)), Fraction(1, 10**9))
    assert plan.tau() == 21 and candidates.height == 122
    keep = plan.select(table, NoiseSource.seeded_for_tests(28))
    held = table[:, 0]
    assert plan.key_loss is not None
    certain = held >= keep_table(*plan.key_loss).certain  # p(n) = 1 exactly
    assert keep[certain].all() and not keep[held == 1].any()
    shown = released_keys(candidates, keep)["zinc"].to_list()
    assert 43 not in shown and 240 not in shown
    p = plan.keep_probability(held)
    assert abs(keep.sum() - p.sum()) <= 5 * np.sqrt((p * (1 - p)).sum()) + 1e-9


@pytest.mark.parametrize("g", [1, 2, 3])
def test_hash_ties_are_broken_by_key_value_whatever_the_row_order(
    g: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review S2: with every hash tied, a unit keeps its G smallest keys, whatever the order of
    the rows (other units' rows included); before, `unique()` then an ordinal rank kept keys by
    position."""
    from dprelease.mechanism.selection import _aggregate

    monkeypatch.setattr(_aggregate, "_order", lambda unit, keys, salt: pl.lit(0, pl.UInt64))
    frame = random_rows(5, units=20, rows=300)
    expected = {
        person: sorted(set(group["dx"].to_list()))[:g]
        for (person,), group in frame.group_by("person")
    }
    wanted = collections.Counter(k for keys in expected.values() for k in keys)
    for seed in range(4):
        shuffled = frame.sample(fraction=1.0, shuffle=True, seed=seed)
        candidates, table = units_per_key(shuffled, "person", ["dx"], g, salt=3)
        got = dict(zip(candidates["dx"].to_list(), table.sum(axis=1).tolist(), strict=True))
        assert got == dict(wanted)
