"""The aggregate key selection needs, on polars: units per (candidate key, keys its unit holds).

This is the reference the engines' row plan will compute (docs/selection.md, phase 2): from the
rows left after the period filter, the domain filter of the other group-by columns and the drop
of null units, the distinct (unit, key) pairs of the selected column(s); the public `always`
keys removed (they are released anyway and are no candidates); each unit bounded to G keys, the
G with the smallest salted hash of (unit, key) — a choice from the unit's own keys only, so one
unit's presence moves only its own kept keys; then, per candidate key, the number of units
holding it split by g, the number of keys their unit kept.

Ties of the 64-bit hash within one unit are broken by the key values (the unit's pairs sorted by
(hash, keys), then numbered), so no unit ever keeps more than G keys (the sensitivity rests on
it) and which keys it keeps depends on its own pairs only, never on the position of other units'
rows (which `unique()` does not fix). Candidates come back sorted by key, so the order of the
released keys says nothing about the order of the input.
"""

from __future__ import annotations

import numpy as np
import polars as pl

_RANK = ":selection_rank"
_HELD = ":selection_held"
_UNITS = ":selection_units"
#: The column of `units_table`'s counts: units holding the key that kept g keys.
UNITS = _UNITS


def units_per_key(
    rows: pl.LazyFrame | pl.DataFrame,
    unit: str,
    keys: list[str],
    max_keys_per_unit: int,
    salt: int,
    always: pl.DataFrame | None = None,
) -> tuple[pl.DataFrame, np.ndarray]:
    """The candidate keys (a frame of `keys`, sorted) and units[k, g − 1] (int64, keys × G)."""
    pairs = rows.lazy().select(unit, *keys).drop_nulls()
    if always is not None:
        pairs = pairs.join(always.lazy().select(keys), on=keys, how="anti")
    ordered = pairs.with_columns(_order(unit, keys, salt).alias(_RANK))
    if max_keys_per_unit == 1:  # the key of smallest (hash, key) per unit: no distinct pairs
        kept = (
            ordered.group_by(unit)
            .agg(pl.col(k).sort_by([_RANK, *keys]).first() for k in keys)
            .with_columns(pl.lit(1, dtype=pl.UInt32).alias(_HELD))
        )
    else:
        position = pl.int_range(pl.len()).over(unit)  # in (hash, keys) order: ties by key value
        ranked = ordered.unique().sort(unit, _RANK, *keys).filter(position < max_keys_per_unit)
        kept = ranked.drop(_RANK).with_columns(pl.len().over(unit).alias(_HELD))
    counts = kept.group_by(*keys, _HELD).agg(pl.len().alias(_UNITS)).collect()
    return units_table(counts, keys, max_keys_per_unit)


def units_table(
    counts: pl.DataFrame, keys: list[str], max_keys_per_unit: int, held: str = _HELD
) -> tuple[pl.DataFrame, np.ndarray]:
    """The candidates (sorted) and units[k, g − 1] from `counts`: one row per (key, g) with the
    number of units (`_UNITS`) holding the key that kept g (`held`) keys. Every engine hands
    its counts to this, so the table is laid out the same way whatever computed them."""
    counts = counts.rename({held: _HELD}).sort(keys)
    candidates = counts.select(keys).unique(maintain_order=True)
    if candidates.height == 0:
        return candidates, np.zeros((0, max_keys_per_unit), dtype=np.int64)
    index = candidates.with_row_index(_RANK)
    located = counts.join(index, on=keys, how="left", nulls_equal=True)
    table = np.zeros((candidates.height, max_keys_per_unit), dtype=np.int64)
    np.add.at(
        table,
        (located[_RANK].to_numpy(), located[_HELD].to_numpy().astype(np.int64) - 1),
        located[_UNITS].to_numpy().astype(np.int64),
    )
    return candidates, table


def _order(unit: str, keys: list[str], salt: int) -> pl.Expr:
    """The salted 64-bit hash of a (unit, key) pair that ranks a unit's keys (ties: by key)."""
    return pl.struct(unit, *keys).hash(seed=salt)


def released_keys(
    candidates: pl.DataFrame, keep: np.ndarray, always: pl.DataFrame | None = None
) -> pl.DataFrame:
    """The keys a release shows: the public `always` keys and the kept candidates, sorted."""
    kept = candidates.filter(pl.Series(keep, dtype=pl.Boolean))
    if always is not None:
        kept = pl.concat([always.select(candidates.columns), kept], how="vertical_relaxed")
    return kept.unique().sort(candidates.columns)
