"""The protocol every statistic kind follows: one `Kind` per kind (the registry's values) and one
`Allocated` per statistic of a release, with a fixed life cycle.

A kind, from public facts only (the resolved spec, the loss, the protected change):

1. takes part in the split of the release's loss (`spends`; with accuracy targets, `need`);
2. makes the measurements others may reuse (`owned`: a count's, a sum's), then allocates its
   statistic (`allocate`): its sensitivity from the protected change, how its share of the loss
   is spent (the noise law of each measurement, or a selection mechanism's plan).

The statistic allocated (`Allocated`), as PipelineDP's combiners go from accumulator to metric:

3. asks the row plan for exact integer aggregates: a sum per measurement it reads (`vectors`,
   counted once however many statistics read them) and anything else (`histograms`);
4. after every measurement's noise is drawn (centrally, or as shares), draws its selection
   mechanism if it has one (`select`, e.g. a quantile's permute-and-flip);
5. post-processes noisy values into its released columns (`columns`), and states its manifest
   entry (`entry`, from which the planner reads its accuracy: `ReleasedEntry.accuracy`).

Nothing here or in a kind reads data but step 4's exact aggregates, and nothing that a kind
states depends on them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar

import polars as pl

from dprelease.change import ProtectedChange
from dprelease.errors import SpecError
from dprelease.loss import Measure, Mechanism, PrivacyLoss
from dprelease.mechanism.engines import ExactAggregates, GridPoint, Units
from dprelease.mechanism.kinds._measurement import Measurement, Measuring
from dprelease.mechanism.kinds._stated import ReleasedEntry
from dprelease.mechanism.margins import MarginAccuracy, Measured, Outcome
from dprelease.mechanism.noise import NoiseSource
from dprelease.spec import PostProcessing, ResolvedSpec, Statistic, StatisticModel


@dataclass(frozen=True)
class Context:
    """What every statistic of one allocation is allocated with."""

    resolved: ResolvedSpec
    neighbours: ProtectedChange
    mechanism: Mechanism
    measure: Measure

    @property
    def measuring(self) -> Measuring:
        return Measuring(self.resolved, self.neighbours, self.mechanism)


@dataclass(frozen=True)
class Prerequisite:
    """A ledger record a release rests on, checked before it is recorded (`publish`): a
    local-DP wave whose ε was charged when its answers were given, recorded in the release's
    scope with these parameters (`spec_hash`)."""

    release_id: str
    spec_hash: str
    what: str  # the record in words, for the refusal: "wave 'diabetes-1976'"


@dataclass(frozen=True)
class Allocated(ABC):
    """One statistic allocated: its share of the loss and how it is made (see the module)."""

    statistic: Statistic
    loss: PrivacyLoss  # what it spends itself

    @property
    def epsilon(self) -> Fraction:
        """The ε of its share (a pure release; ValueError in a zCDP one, as for any share)."""
        return self.loss.epsilon

    @property
    def vectors(self) -> tuple[Measurement, ...]:
        """The measurements it reads, its own or reused, in order."""
        return ()

    def own(self) -> list[Measurement]:
        """The measurements it pays for from its own share."""
        return []

    def published(self) -> list[str]:
        """The measurements it publishes in the column's units (a sum's, a weighted count's):
        with margins, each gets a decimal place of its own."""
        return []

    def histograms(self, reads: list[str]) -> list[GridPoint]:
        """Row-plan aggregates besides its measurements' sums (`reads`: the value columns the
        plan reads, in order)."""
        return []

    def read_columns(self) -> list[str]:
        """The value columns its histograms read (its measurements' are their own)."""
        return []

    def tallies(self) -> list[Units]:
        """Exact sums it reads without noise, because what they sum was randomized before it
        was collected (local DP's reports): row-plan sums besides its measurements'."""
        return []

    def prerequisites(self) -> list[Prerequisite]:
        """Ledger records the release rests on (a wave's charge), checked before recording."""
        return []

    def select(self, exact: ExactAggregates, cells: int, source: NoiseSource) -> Any:
        """Its selection mechanism drawn on the exact aggregates, after every measurement's
        noise (None: it has none)."""
        return None

    @abstractmethod
    def columns(
        self, released: Mapping[str, Measured], selected: Any, post: PostProcessing
    ) -> list[pl.Series]:
        """Its released columns, from its measurements' released values and its selection."""

    @abstractmethod
    def entry(
        self, post: PostProcessing, margins: MarginAccuracy | None, outcome: Outcome | None
    ) -> ReleasedEntry:
        """What the manifest (and the planner) says about it."""


class Kind(ABC):
    """One statistic kind (see the module): what the allocation asks of it."""

    #: The spec's `kind:` values it serves, and its spec model (`spec._statistics`).
    names: ClassVar[tuple[str, ...]]
    model: ClassVar[type[StatisticModel]]
    #: Its manifest entry model, one of the manifest's `statistics`.
    entry: ClassVar[type[ReleasedEntry]]

    def spends(self, stat: Any, resolved: ResolvedSpec) -> bool:
        """Whether it takes a share of the release's loss (a mean that reuses both its parts
        does not)."""
        return True

    def need(self, stat: Any, ctx: Context) -> Fraction:
        """With accuracy targets, the loss its target needs (the split is in proportion)."""
        raise SpecError("target", f"a {stat.kind.value} has no margin of error to target")

    def no_target(self, stat: Any) -> str:
        """Why a target margin cannot be asked of it (the planner's refusal)."""
        return f"{stat.name!r} is a {stat.kind.value}: it has no margin of error to target"

    def owned(self, stat: Any, share: PrivacyLoss, ctx: Context, path: str) -> Measurement | None:
        """The measurement it makes for itself that other statistics may reuse (None)."""
        return None

    @abstractmethod
    def allocate(
        self,
        stat: Any,
        share: PrivacyLoss,
        ctx: Context,
        owned: Mapping[str, Measurement],
        path: str,
    ) -> Allocated:
        """Its statistic allocated from its share (`owned`: every statistic's own
        measurement, by statistic name)."""
