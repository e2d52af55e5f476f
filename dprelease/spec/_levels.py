"""Levels of a release with margins: the public structure of which cells each margin row sums.

Level 0 is the finest (the cells: every key column); each declared margin (a subset of the key
columns, `[]` the grand total) is a coarser level. The structure is built once from the public
key grid when a spec is resolved, and everything downstream (accounting, the consistent estimate,
the released table's rows) reads it from there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from dprelease.spec._values import LEVEL_COLUMN

if TYPE_CHECKING:
    import scipy.sparse as sp  # type: ignore[import-untyped]


def _ordered(grid: pl.DataFrame, columns: Sequence[str]) -> tuple[str, ...]:
    """`columns` in the grid's column order, validated (the order a margin is written in
    does not matter: [clinic, region] and [region, clinic] are the same margin)."""
    wanted = list(columns)
    unknown = [c for c in wanted if c not in grid.columns]
    if unknown:
        raise ValueError(f"margin column(s) {unknown} are not key columns {grid.columns}")
    if len(set(wanted)) != len(wanted):
        raise ValueError(f"margin {wanted} repeats a column")
    return tuple(c for c in grid.columns if c in wanted)


def level_grid(grid: pl.DataFrame, columns: Sequence[str]) -> pl.DataFrame:
    """The rows of one level: the distinct combinations of `columns` in order of first
    appearance in `grid`, with every other key column null (typed as in `grid`).

    This is the row order of a level's measurement and of its released values; with the null
    columns it is also the shape of that level's block in the released table. `columns=[]`
    gives one all-null row (the grand total); all key columns give `grid` itself.
    """
    kept = _ordered(grid, columns)
    others = [pl.lit(None, dtype=grid.schema[c]).alias(c) for c in grid.columns if c not in kept]
    if not kept:
        return pl.select(others)
    rows = grid.select(kept).unique(maintain_order=True)
    return rows.with_columns(others).select(grid.columns)


def _row_index(grid: pl.DataFrame, columns: tuple[str, ...]) -> np.ndarray:
    """For each cell, its row in `level_grid(grid, columns)`."""
    if not columns:
        return np.zeros(grid.height, dtype=np.int64)
    tmp = "_" * (max(len(c) for c in grid.columns) + 1)  # longer than any key column: no clash
    keys = grid.select(columns)
    rows = keys.unique(maintain_order=True).with_row_index(tmp)
    joined = keys.join(rows, on=list(columns), how="left", maintain_order="left")
    return joined[tmp].to_numpy().astype(np.int64)


@dataclass(frozen=True, eq=False)
class Levels:
    """The public structure of a release with margins: which cells each level's rows sum.

    Level 0 is the finest (all key columns, rows = the grid in order); levels 1.. are the
    margins in the order given. `index[ℓ][i]` is the row of level ℓ that cell i belongs to.
    """

    key_columns: tuple[str, ...]
    columns: tuple[tuple[str, ...], ...]
    index: tuple[np.ndarray, ...]
    sizes: tuple[int, ...]

    @classmethod
    def build(cls, grid: pl.DataFrame, margins: Sequence[Sequence[str]]) -> Levels:
        """Validate `margins` against the finest key grid and index every level.

        Refused (ValueError): an empty grid, null or repeated grid rows, unknown or repeated
        columns, a margin given twice, or a margin equal to the finest level (which is implicit).
        """
        if grid.width == 0 or grid.height == 0:
            raise ValueError("the key grid must have at least one key column and one row")
        if grid.null_count().sum_horizontal().item():
            raise ValueError("the key grid has null keys")
        if grid.is_duplicated().any():
            raise ValueError("the key grid repeats a key combination")
        finest = tuple(grid.columns)
        columns = [finest]
        for margin in margins:
            ordered = _ordered(grid, margin)
            if ordered == finest:
                raise ValueError("the finest level is implicit; do not list it as a margin")
            if ordered in columns:
                raise ValueError(f"margin {list(ordered)} is listed twice")
            columns.append(ordered)
        index = tuple(_row_index(grid, c) for c in columns)
        sizes = tuple(int(i.max()) + 1 for i in index)
        return cls(finest, tuple(columns), index, sizes)

    @property
    def n_cells(self) -> int:
        return self.sizes[0]

    def name(self, level: int) -> str:
        """A level's label for the released table: its columns joined by ',', or 'total'."""
        return ",".join(self.columns[level]) or "total"

    def matrix(self, level: int) -> sp.csr_matrix:
        """Aℓ: the 0/1 (rows × cells) matrix that sums cells into level ℓ's rows."""
        import scipy.sparse as sp  # type: ignore[import-untyped]  # typed only with scipy-stubs

        rows = self.index[level]
        ones = np.ones(self.n_cells)
        return sp.csr_matrix(
            (ones, (rows, np.arange(self.n_cells))), (self.sizes[level], rows.size)
        )

    def aggregate(self, cells: np.ndarray) -> tuple[np.ndarray, ...]:
        """Every level as sums of `cells` (level 0 is `cells` itself)."""
        return (cells, *(self.matrix(k) @ cells for k in range(1, len(self.sizes))))


def stacked_keys(grid: pl.DataFrame, levels: Levels) -> pl.DataFrame:
    """A `level` column and each level's rows in turn (`level_grid`: null in the key columns
    the level aggregates away): the key columns of a released table with margins."""
    return pl.concat(
        level_grid(grid, columns).select(pl.lit(levels.name(k)).alias(LEVEL_COLUMN), pl.all())
        for k, columns in enumerate(levels.columns)
    )
