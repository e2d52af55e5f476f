"""What margins of error, the consistent estimate and the rounding need of a noisy vector."""

from __future__ import annotations

from fractions import Fraction
from typing import Protocol

from dprelease.mechanism.noise import LevelNoise


class Vector(Protocol):
    """One noisy integer vector over the key grid, at every level (the cells, then each margin
    in the spec's order): a statistic kind's measurement, as post-processing sees it."""

    @property
    def name(self) -> str: ...

    @property
    def granularity(self) -> Fraction: ...

    @property
    def counts_rows(self) -> bool:
        """A count of rows: its truth is an integer, released as one."""
        ...

    @property
    def nonnegative_values(self) -> bool:
        """No row can add a negative value, so the truth is ≥ 0 too."""
        ...

    @property
    def moe95(self) -> float:
        """The cells' own 95% margin of error (without margins: the released one)."""
        ...

    @property
    def levels(self) -> tuple[LevelNoise, ...]: ...
