"""A released table shown to people: its first rows (of each level, with margins) and a caption
saying how much is shown. The command line renders it with rich, Dagster as Markdown; both show
the same rows with the same words."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from dprelease.spec import LEVEL_COLUMN


def level_blocks(table: pl.DataFrame) -> list[pl.DataFrame]:
    """A released table's levels in order, each its own frame (without margins: the table)."""
    if LEVEL_COLUMN not in table.columns:
        return [table]
    return [block for _, block in table.group_by(LEVEL_COLUMN, maintain_order=True)]


@dataclass(frozen=True)
class Preview:
    """The shown columns (and whether each is numeric), the shown rows as text, level by level,
    and a caption."""

    columns: list[str]
    numeric: list[bool]
    blocks: list[list[list[str]]]
    caption: str


def _shown(block: pl.DataFrame, rows: int) -> str:
    """How much of one block (a level, or the table) the preview shows."""
    if block.height == 1:
        shown = "1 row"
    elif block.height > rows:
        shown = f"first {rows} of {block.height} rows"
    else:
        shown = f"{block.height} rows"
    return f"{shown} of {block[LEVEL_COLUMN][0]}" if LEVEL_COLUMN in block.columns else shown


def preview(
    table: pl.DataFrame,
    *,
    rows: int,
    hide: tuple[str, ...] = (),
    cell: Callable[[object], str] = str,
) -> Preview:
    """The first `rows` rows of each level of `table`, without the columns whose names end in
    one of `hide`, each value written by `cell`."""
    shown = table.select(c for c in table.columns if not c.endswith(hide)) if hide else table
    blocks = level_blocks(shown)
    text = [[[cell(v) for v in row] for row in block.head(rows).iter_rows()] for block in blocks]
    return Preview(
        columns=shown.columns,
        numeric=[dtype.is_numeric() for dtype in shown.dtypes],
        blocks=text,
        caption=", ".join(_shown(block, rows) for block in blocks),
    )
