"""The aggregate key selection needs, on polars: units per (candidate key, keys its unit holds).

This is the reference the engines' row plan will compute (docs/selection.md, phase 2): from the
rows left after the period filter, the domain filter of the other group-by columns and the drop
of null units, the distinct (unit, key) pairs of the selected column(s); the public `always`
keys removed (they are released anyway and are no candidates); each unit bounded to G keys, the
G with the smallest salted hash of (unit, key) — a choice from the unit's own keys only, so one
unit's presence moves only its own kept keys; then, per candidate key, the number of units
holding it split by g, the number of keys their unit kept.

Ties of the 64-bit hash within one unit are broken by position ("ordinal" rank), so no unit ever
keeps more than G keys: the sensitivity rests on it. Candidates come back sorted by key, so the
order of the released keys says nothing about the order of the input.
"""

from __future__ import annotations

import numpy as np
import polars as pl

_RANK = ":selection_rank"
_HELD = ":selection_held"
_UNITS = ":selection_units"


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
    order = pl.struct(unit, *keys).hash(seed=salt)
    if max_keys_per_unit == 1:  # the key of smallest hash per unit: no distinct pairs needed
        by = [_RANK, *keys] if len(keys) > 1 else [_RANK]  # joint keys: one row's values, ties too
        kept = (
            pairs.with_columns(order.alias(_RANK))
            .group_by(unit)
            .agg(pl.col(k).sort_by(by).first() for k in keys)
            .with_columns(pl.lit(1, dtype=pl.UInt32).alias(_HELD))
        )
    else:
        ranked = pairs.unique().filter(order.rank("ordinal").over(unit) <= max_keys_per_unit)
        kept = ranked.with_columns(pl.len().over(unit).alias(_HELD))
    counts = kept.group_by(*keys, _HELD).agg(pl.len().alias(_UNITS)).sort(keys).collect()
    candidates = counts.select(keys).unique(maintain_order=True)
    if candidates.height == 0:
        return candidates, np.zeros((0, max_keys_per_unit), dtype=np.int64)
    index = candidates.with_row_index(_RANK)
    located = counts.join(index, on=keys, how="left")
    table = np.zeros((candidates.height, max_keys_per_unit), dtype=np.int64)
    np.add.at(
        table,
        (located[_RANK].to_numpy(), located[_HELD].to_numpy() - 1),
        located[_UNITS].to_numpy(),
    )
    return candidates, table


def released_keys(
    candidates: pl.DataFrame, keep: np.ndarray, always: pl.DataFrame | None = None
) -> pl.DataFrame:
    """The keys a release shows: the public `always` keys and the kept candidates, sorted."""
    kept = candidates.filter(pl.Series(keep, dtype=pl.Boolean))
    if always is not None:
        kept = pl.concat([always.select(candidates.columns), kept], how="vertical_relaxed")
    return kept.unique().sort(candidates.columns)
