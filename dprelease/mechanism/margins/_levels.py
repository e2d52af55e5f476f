"""Releases with margins: every level measured, one table that adds up.

A spec with `margins:` releases its cells and each margin (a subset of the key columns; `[]` is
the grand total). Each level of each measurement has its own discrete Laplace noise, from its
share of the measurement's ε (`kinds`). After the noise, everything is post-processing of
the noisy values with public parameters (`_consistency`): the weighted least-squares estimate of
the cells from every level (constrained to ≥ 0 where `nonnegative` applies), every level released
as sums of the released cells, and a controlled rounding (counts to integers, sums to their
decimal place) that keeps every margin the sum of its cells.

`margin_accuracy` is public: the levels and every value's 95% margin of error, from the resolved
spec and the noisy vectors' laws, before any budget is reserved. `release_levels` runs on the
noisy totals and cannot fail on the values it post-processes: a solver that does not converge
falls back, deterministically, to an estimate that needs no solver, and says so
(`Outcome.fallbacks`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from dprelease.errors import INTERRUPTS
from dprelease.mechanism.margins._decimals import Measured, noise_decimals
from dprelease.mechanism.margins._vector import Vector
from dprelease.mechanism.noise import NoiseLaw
from dprelease.spec import Levels, PostProcessing, ResolvedSpec

if TYPE_CHECKING:  # the solvers (scipy, Clarabel, HiGHS) load only for a release with margins
    from dprelease.mechanism.margins._consistency import Estimate
    from dprelease.mechanism.margins._rounding import Rounded

#: The shift every value keeps below in a controlled rounding of at most two nested chains of
#: margins (the spec refuses more), in units of the rounding (`_rounding.round_additive`).
PLANNED_SHIFT = 1.0
#: Scaled values this large are already integers in float64, and above 2^63 no longer fit the
#: rounding's int64: they are left as they are (see `_round_additively`).
_EXACT_FLOAT = 2.0**52
#: Counts are published as int64; a float this large still converts exactly.
_INT64_SAFE = 2.0**62


@dataclass(frozen=True, eq=False)
class LevelLaws:
    """One measurement's public facts at every level (the cells first)."""

    counts_rows: bool  # a count of rows (`Vector.counts_rows`): its truth is an integer
    laws: tuple[NoiseLaw, ...]
    moe95: tuple[np.ndarray, ...]  # of the consistent estimate, per row, in value units
    nonnegative: bool  # estimated under cells ≥ 0
    places: int | None  # a published sum: the decimal place of its controlled rounding

    @property
    def rounded(self) -> bool:
        """Counts of rows are rounded to integers, published sums (and weighted counts) to their
        place; a mean's own sum (or weighted count) is divided as estimated."""
        return self.counts_rows or self.places is not None

    @property
    def unit(self) -> float:
        """The rounding's unit in value units: 1 for counts, 10^-places for a published sum."""
        return 1.0 if self.places is None else 10.0**-self.places

    def published_moe95(self, shifts: tuple[float, ...]) -> list[np.ndarray]:
        """Per level, the margin of error of the released values: the estimate's, plus what the
        controlled rounding may move a value (< shift units). A count's truth is an integer, so
        its margin is ⌈h + shift⌉ − 1 (`rounded_moe95`)."""
        from dprelease.mechanism.margins._rounding import rounded_moe95

        if self.counts_rows:
            return [rounded_moe95(h, s) for h, s in zip(self.moe95, shifts, strict=True)]
        return [h + s * self.unit for h, s in zip(self.moe95, shifts, strict=True)]


@dataclass(frozen=True, eq=False)
class MarginAccuracy:
    """Everything public about a release with margins: its levels and, per measurement, the
    noise laws and 95% margins of error of every level."""

    levels: Levels
    weights: tuple[float, ...]  # `level_weights`, the cells first
    shares: tuple[Fraction, ...]  # the fraction of each measurement's ε per level
    accuracy: Mapping[str, LevelLaws]

    def planned_shifts(self) -> tuple[float, ...]:
        return (PLANNED_SHIFT,) * len(self.levels.sizes)


def _laws(m: Vector) -> tuple[NoiseLaw, ...]:
    return tuple(level.law for level in m.levels)


def nonnegative(m: Vector, post: PostProcessing) -> bool:
    """Whether the estimate is constrained to cells ≥ 0: counts (weighted or not), and sums
    whose values cannot be negative, when `nonnegative` is set (the same values a release
    without margins clamps)."""
    return post.nonnegative and m.nonnegative_values


def margin_accuracy(
    resolved: ResolvedSpec,
    vectors: Sequence[Vector],
    published: Collection[str],
    only: Collection[str] | None = None,
) -> MarginAccuracy | None:
    """The public facts of a release with margins (None without): reads no data. `published`
    names the vectors released in value units (a sum's, a weighted count's: they get a decimal
    place); `only` (vector names) limits the margins of error computed to those (the planner's
    search)."""
    levels = resolved.levels
    if levels is None:
        return None
    from dprelease.mechanism.margins._moe import moe95

    post = resolved.spec.postprocess
    cache: dict[tuple[NoiseLaw, ...], tuple[np.ndarray, ...]] = {}
    accuracy = {}
    for m in vectors:
        if only is not None and m.name not in only:
            continue
        laws = _laws(m)
        if laws not in cache:
            cache[laws] = moe95(levels, laws)
        places = None
        if m.name in published:
            smallest = min(float(h.min()) for h in cache[laws])
            places = post.decimals if post.decimals is not None else noise_decimals(smallest)
        accuracy[m.name] = LevelLaws(m.counts_rows, laws, cache[laws], nonnegative(m, post), places)
    weights = tuple(resolved.spec.level_weights or [1.0] * len(levels.sizes))
    return MarginAccuracy(levels, weights, resolved.level_shares, accuracy)


# --------------------------------------------------------------------------- after the noise


@dataclass
class Outcome:
    """What post-processing did that depends on the noisy values (and so may be published):
    each measurement's rounding bound per level, and any solver fallback, in words."""

    shifts: dict[str, tuple[float, ...]] = field(default_factory=dict)
    fallbacks: list[str] = field(default_factory=list)

    @classmethod
    def planned(cls, margins: MarginAccuracy) -> Outcome:
        """What a release states before its noise is drawn (and, but for a fallback, after)."""
        shift, none = margins.planned_shifts(), (0.0,) * len(margins.levels.sizes)
        return cls(
            {name: shift if laws.rounded else none for name, laws in margins.accuracy.items()}
        )


def level_sums(cells: pl.Series, levels: Levels) -> list[pl.Series]:
    """Each level's exact aggregate from the cells' (integers, level order; level 0 is the
    cells): a margin row is the exact Int128 sum of its cells, which cannot overflow (the grand
    total is a sum over fewer than 2^63 rows of at most 2^53 units)."""
    sums = [cells]
    for k in range(1, len(levels.sizes)):
        frame = pl.DataFrame({"row": levels.index[k], "value": cells})
        summed = frame.group_by("row").agg(pl.col("value").sum()).sort("row")
        sums.append(summed.get_column("value"))
    return sums


def _estimate(
    levels: Levels, noisy: list[np.ndarray], acc: LevelLaws, name: str, outcome: Outcome
) -> Estimate:
    """The consistent estimate; under `nonnegative` the constrained one, falling back to the
    linear estimate (whose margins of error are exact) if the solver does not converge."""
    from dprelease.mechanism.margins._consistency import consistent, consistent_nonnegative

    if acc.nonnegative:
        try:
            return consistent_nonnegative(levels, noisy, acc.laws)
        except INTERRUPTS:
            raise
        except BaseException as exc:  # any solver failure (a panic too) falls back, never fails
            outcome.fallbacks.append(
                f"{name}: the nonnegative solve did not converge on these noisy values "
                f"({type(exc).__name__}); the unconstrained estimate is released"
            )
    return consistent(levels, noisy, acc.laws)


def _round_nearest(estimate: Estimate) -> Rounded:
    """Cells to the nearest integer and every margin their sum: additive, needs no solver;
    each level's shift bound is what it reached (strictly above)."""
    from dprelease.mechanism.margins._rounding import Rounded

    levels = estimate.levels
    cells = np.rint(estimate.values[0])
    values = levels.aggregate(cells)
    shifts = tuple(
        float(np.floor(np.max(np.abs(v - e)))) + 1.0
        for v, e in zip(values, levels.aggregate(estimate.values[0]), strict=True)
    )
    return Rounded(levels, values, shifts)


def _round_additively(estimate: Estimate, name: str, outcome: Outcome) -> Rounded:
    """`round_additive`, or the nearest-integer rounding where it cannot be used: values beyond
    float64's integers (nothing to round), or a failing HiGHS solve (said in `outcome`)."""
    from dprelease.mechanism.margins._rounding import round_additive

    largest = estimate.levels.aggregate(np.abs(estimate.values[0]))  # a margin sums its cells
    if max(float(np.max(level)) for level in largest) >= _EXACT_FLOAT:
        return _round_nearest(estimate)
    try:
        return round_additive(estimate)
    except INTERRUPTS:
        raise
    except BaseException as exc:  # any solver failure (a panic too) falls back, never fails
        outcome.fallbacks.append(
            f"{name}: the additive rounding failed on these noisy values ({type(exc).__name__}); "
            "cells were rounded to the nearest integer and every margin summed from them"
        )
        return _round_nearest(estimate)


def rounded_counts(
    values: np.ndarray, moe95: np.ndarray, levels: Levels | None, name: str, outcome: Outcome
) -> tuple[np.ndarray, np.ndarray]:
    """Estimated counts whose truth is an integer (every level's rows in turn, each margin row
    the sum of its cells) as integers, every margin still the sum of its rounded cells
    (`round_additive`, else the nearest integers), with their 95% margins `moe95` widened by
    what the rounding may move them: ⌈h + shift⌉ − 1, as for counts of rows."""
    from dprelease.mechanism.margins._consistency import Estimate

    if levels is None:
        return np.rint(values).astype(np.int64), np.ceil(moe95 + 1.0) - 1.0
    cells = values[: levels.n_cells]
    rounded = _round_additively(Estimate(levels, levels.aggregate(cells)), name, outcome)
    shifts = np.concatenate(
        [np.full(size, shift) for size, shift in zip(levels.sizes, rounded.max_shift, strict=True)]
    )
    return np.concatenate(rounded.values).astype(np.int64), np.ceil(moe95 + shifts) - 1.0


def _as_int64(values: np.ndarray, name: str, outcome: Outcome) -> np.ndarray:
    """Rounded counts as int64, saturating (and saying so) where noise at the largest scales the
    sampler draws, summed over a large margin, passes ±2^62: never a silent wrap-around."""
    if np.max(np.abs(values)) < _INT64_SAFE:
        return values.astype(np.int64)
    outcome.fallbacks.append(
        f"{name}: noisy counts beyond ±2^62 were saturated there (the noise scale is far beyond "
        "any useful release)"
    )
    return np.clip(values, -_INT64_SAFE, _INT64_SAFE).astype(np.int64)


def _scaled(estimate: Estimate, places: int) -> Estimate:
    """The cells in units of 10^-places (dividing by an exact power of ten when places < 0)."""
    from dprelease.mechanism.margins._consistency import Estimate

    cells = estimate.values[0]
    scaled = cells * 10.0**places if places >= 0 else cells / 10.0**-places
    return Estimate(estimate.levels, (scaled,))


def _unscaled(values: np.ndarray, places: int) -> np.ndarray:
    """Integers in units of 10^-places back to value units, as `_decimals.round_to` does."""
    return values / 10.0**places if places >= 0 else values * 10.0**-places


def release_levels(
    vectors: Sequence[Vector],
    totals: Mapping[str, Sequence[pl.Series]],
    margins: MarginAccuracy,
) -> tuple[dict[str, Measured], Outcome]:
    """Every vector's noisy integer totals at every level (`totals`: Int128 units) made
    consistent and rounded additively: the released values (every level's rows in turn) and
    what the rounding did.

    Counts of rows are rounded to integers; a published sum or weighted count to its decimal
    place; a mean's own sum (and weighted count) is left as estimated (a mean is divided, not
    summed). Nothing here can fail because of a value: both solvers fall back."""
    levels = margins.levels
    outcome = Outcome()
    measured = {}
    for m in vectors:
        acc = margins.accuracy[m.name]
        noisy = [
            total.cast(pl.Float64).to_numpy() * float(m.granularity) for total in totals[m.name]
        ]
        estimate = _estimate(levels, noisy, acc, m.name, outcome)
        if m.counts_rows:
            rounded = _round_additively(estimate, m.name, outcome)
            values = _as_int64(np.concatenate(rounded.values), m.name, outcome)
            shifts = rounded.max_shift
            series = pl.Series(values, dtype=pl.Int64)
        elif acc.places is not None:
            rounded = _round_additively(_scaled(estimate, acc.places), m.name, outcome)
            series = pl.Series(_unscaled(np.concatenate(rounded.values).astype(float), acc.places))
            shifts = rounded.max_shift
        else:
            series = pl.Series(np.concatenate(estimate.values))
            shifts = (0.0,) * len(levels.sizes)
        outcome.shifts[m.name] = shifts
        moe = np.concatenate(acc.published_moe95(shifts))
        places = None if acc.places is None else np.full(moe.size, float(acc.places))
        measured[m.name] = Measured(series, moe, places)
    return measured, outcome
