"""The resolved spec: a validated spec with every public fact derived from it, once.

Resolving reads the public key domains and builds what every later step needs from them: the key
grid (the rows of the released table), the levels of a release with margins and the share of each
measurement's budget every level spends. Accounting, engines, margins, the manifest and the
planner all read these facts here instead of deriving them again.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from pathlib import Path

import numpy as np
import polars as pl

from dprelease.loss import split_by_weights
from dprelease.spec._levels import Levels, stacked_keys
from dprelease.spec._local import local_path
from dprelease.spec._model import ReleaseSpec
from dprelease.spec._publish import PublishSpec


@dataclass(frozen=True, eq=False)
class ResolvedSpec:
    """A validated spec plus its public key domains (the only keys ever released) and the facts
    derived from them."""

    spec: ReleaseSpec
    domains: tuple[pl.DataFrame, ...]  # one per `group_by` entry, with that entry's key columns
    levels: Levels | None = None  # with margins: the cells, then each margin, over the key grid
    publish: PublishSpec | None = None  # the spec file's `publish:` section, if it has one
    path: Path | None = field(default=None, repr=False)  # the spec file, if read from one
    #: per statistic with published sampling SEs: the released rows' keys (and level) and `_se`
    standard_errors: Mapping[str, pl.DataFrame] = field(default_factory=dict, repr=False)
    #: read from a local spec file (`wave:` and `release:`), whose statistic the user never wrote
    local: bool = field(default=False, repr=False)

    def yaml_path(self, path: str) -> str:
        """Where the user wrote what `path` (in the central release spec: `release.statistics[0]
        .column`) names: in a local spec file the wave's answers' fields are `wave.question`,
        `wave.epsilon`, `release.hash_column`, ... (`_local.local_path`); else `path` itself."""
        return local_path(path) if self.local else path

    @cached_property
    def key_grid(self) -> pl.DataFrame:
        """Every combination of public keys, in declared order: the rows of the released table."""
        grid = pl.DataFrame()
        for frame in self.domains:
            grid = (
                frame
                if grid.width == 0
                else grid.join(frame, how="cross", maintain_order="left_right")
            )
        return grid

    @property
    def cells(self) -> int:
        """Cells of the released table: the key grid's size (1 when ungrouped); public."""
        return math.prod(frame.height for frame in self.domains)

    def key_dtype(self, column: str) -> pl.DataType:
        return next(frame.schema[column] for frame in self.domains if column in frame.columns)

    @cached_property
    def released_keys(self) -> pl.DataFrame:
        """The key columns of the released table: the key grid, or with margins a `level` column
        and every level's rows in turn."""
        return self.key_grid if self.levels is None else stacked_keys(self.key_grid, self.levels)

    @cached_property
    def margin_columns(self) -> tuple[tuple[str, ...], ...]:
        """Each margin's key columns in the order of the key grid (`[]` of the spec: ())."""
        keys = self.spec.key_columns
        return tuple(
            tuple(column for column in keys if column in margin)
            for margin in self.spec.margins or []
        )

    @cached_property
    def level_grouped(self) -> tuple[bool, ...]:
        """Per level (the cells, then each margin): whether its rows are groups. A unit's rows
        can move between the rows of a grouped level, which sets its sensitivity."""
        return (bool(self.spec.group_by), *(bool(columns) for columns in self.margin_columns))

    @cached_property
    def level_cells_per_row(self) -> tuple[int, ...]:
        """Per level, the most cells one of its rows sums (the cells themselves: 1): how many
        rows one unit can pile into one row of the level, for its L2 sensitivity."""
        if self.levels is None:
            return (1,)
        return (1, *(int(np.bincount(index).max()) for index in self.levels.index[1:]))

    @cached_property
    def level_shares(self) -> tuple[Fraction, ...]:
        """The fraction of each measurement's budget every level spends (the cells, then each
        margin), in proportion to `level_weights` (default equal) and exact: they sum to 1."""
        if not self.spec.margins:
            return (Fraction(1),)
        weights = self.spec.level_weights or [1.0] * (len(self.spec.margins) + 1)
        return tuple(split_by_weights(Fraction(1), [Fraction(w) for w in weights]))

    @property
    def selected(self) -> tuple[int, ...]:
        """The group-by entries whose keys are selected from the data (`select: true`): their
        domain here is their `always` keys until a selection adds the keys it released."""
        return tuple(i for i, group in enumerate(self.spec.group_by) if group.selects)

    def with_keys(self, index: int, keys: pl.DataFrame) -> ResolvedSpec:
        """This spec with group-by entry `index`'s keys replaced by `keys`: a selection's
        released keys (a DP output), so the rest of the release runs on a grid that is public
        from then on. Only for selected entries; margins are refused with selection."""
        assert index in self.selected and self.levels is None
        domains = list(self.domains)
        domains[index] = keys.cast(self.domains[index].schema)
        return ResolvedSpec(
            self.spec, tuple(domains), None, self.publish, self.path, local=self.local
        )

    @cached_property
    def hash(self) -> str:
        """Identity of what gets released: the spec and its resolved key domains (not ε, which the
        ledger stores with each charge, nor the `publish:` section)."""
        digest = hashlib.sha256(self.spec.canonical_json().encode())
        for frame in self.domains:
            digest.update(json.dumps(frame.to_dict(as_series=False), default=str).encode())
        for name in sorted(self.standard_errors):  # published SEs change the released margins
            frame = self.standard_errors[name]
            digest.update(json.dumps(frame.to_dict(as_series=False), default=str).encode())
        return digest.hexdigest()
