"""Statistic kinds: one module per kind, behind one protocol (`_kind`), and the registry that maps
a spec's `kind:` to it.

    kind = kind_of(stat)                       # the registry: a spec's `kind:` → its Kind
    allocated = kind.allocate(stat, share, ctx, owned, path)
    allocated.vectors, allocated.histograms(reads)     # what it asks of the row plan
    allocated.select(exact, cells, source)             # its selection mechanism, if any
    allocated.columns(released, selected, post), allocated.entry(post, margins, outcome)

A new kind is its spec model (`spec._statistics` or `spec._ratio`, in the `Statistic` union of
`spec._kinds`), its module here
and one line in `KINDS`; its manifest entry joins the manifest through the registry. Nothing
outside this folder asks which kind a statistic is.
"""

from dprelease.mechanism.kinds._kind import Allocated, Context, Kind, Prerequisite
from dprelease.mechanism.kinds._measurement import (
    MarginMeasurement,
    Measurement,
    Measuring,
    auto_granularity,
    granularity_references,
)
from dprelease.mechanism.kinds._stated import (
    EntryModel,
    ExactRational,
    LevelMeasurementEntry,
    MeasurementEntry,
    MoeRange,
    ReleasedEntry,
    SurveyWeightEntry,
    spent,
)
from dprelease.mechanism.kinds.count import Count, CountAllocation, CountEntry
from dprelease.mechanism.kinds.mean import Mean, MeanAllocation, MeanEntry
from dprelease.mechanism.kinds.quantile import (
    Quantile,
    QuantileAllocation,
    QuantileEntry,
    QuantileValueEntry,
    quantile_allocations,
)
from dprelease.mechanism.kinds.randomized import (
    MalformedReports,
    RandomizedAllocation,
    RandomizedEntry,
    RandomizedKind,
    ReportsOfAnotherConfiguration,
    WaveEntry,
    wave_slot,
)
from dprelease.mechanism.kinds.ratio import RatioAllocation, RatioEntry, RatioKind
from dprelease.mechanism.kinds.share import Share, ShareAllocation, ShareEntry
from dprelease.mechanism.kinds.sum import Sum, SumAllocation, SumEntry
from dprelease.spec import StatisticModel

#: The registry: every statistic kind, in the order their manifest entries are listed.
KINDS: tuple[Kind, ...] = (
    Count(),
    Sum(),
    Mean(),
    Quantile(),
    Share(),
    RatioKind(),
    RandomizedKind(),
)
_BY_NAME = {name: kind for kind in KINDS for name in kind.names}
#: Every kind's manifest entry model (the manifest's `statistics` are one of these).
ENTRY_MODELS: tuple[type[ReleasedEntry], ...] = tuple(kind.entry for kind in KINDS)


def kind_of(stat: StatisticModel) -> Kind:
    """The kind of a statistic (its spec's `kind:`)."""
    return _BY_NAME[stat.kind.value]


__all__ = [
    "ENTRY_MODELS",
    "KINDS",
    "Allocated",
    "Context",
    "CountAllocation",
    "CountEntry",
    "EntryModel",
    "ExactRational",
    "Kind",
    "LevelMeasurementEntry",
    "MalformedReports",
    "MarginMeasurement",
    "MeanAllocation",
    "MeanEntry",
    "Measurement",
    "MeasurementEntry",
    "Measuring",
    "MoeRange",
    "QuantileAllocation",
    "QuantileEntry",
    "Prerequisite",
    "QuantileValueEntry",
    "RandomizedAllocation",
    "RandomizedEntry",
    "RatioAllocation",
    "RatioEntry",
    "ReleasedEntry",
    "ReportsOfAnotherConfiguration",
    "ShareAllocation",
    "ShareEntry",
    "SumAllocation",
    "SumEntry",
    "SurveyWeightEntry",
    "WaveEntry",
    "auto_granularity",
    "granularity_references",
    "kind_of",
    "quantile_allocations",
    "spent",
    "wave_slot",
]
