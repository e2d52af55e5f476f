"""What a release says: its manifest (a typed, versioned model with a published JSON Schema), the
manifest's entries built from an allocation, the planner that states them before any data is
read or budget spent, and the preview of a released table.

    manifest = build_manifest(resolved, allocation, change, period, engine, margins, source)
    plan(resolved, loss, change, targets=...)      # what that release will state, without data

Every statement is a function of public inputs (the spec, the loss, the period, the engine, the
noise source and the ledger's bookkeeping), never of the data; the numbers a release publishes
are in its table. `python -m dprelease.statement` prints the manifest's JSON Schema
(docs/manifest.schema.json).
"""

from dprelease.statement._compare import MeasureComparison, StatisticComparison
from dprelease.statement._entries import (
    build_manifest,
    statistic_entry,
    with_outcome,
    with_selected_keys,
)
from dprelease.statement._manifest import (
    MANIFEST_FORMAT,
    NOT_RECORDED,
    LedgerRecord,
    Manifest,
    MoeRange,
    NoiseSourceEntry,
    NotRecorded,
    json_schema,
)
from dprelease.statement._planner import (
    PLAN_FORMAT,
    LevelAccuracy,
    MeasurementAccuracy,
    QuantileAccuracy,
    ReleasePlan,
    StatisticAccuracy,
    accuracy_of,
    epsilon_for_targets,
    plan,
)
from dprelease.statement._preview import Preview, level_blocks, preview
from dprelease.statement._publication import (
    FLAG_CODES,
    PlannedTest,
    PlannedValue,
    PublicationEntry,
    PublicationPlan,
    RoundingEntry,
    RuleEntry,
    SamplingEntry,
)
from dprelease.statement._stored import LegacyManifest, manifest_problems, parse_manifest

__all__ = [
    "FLAG_CODES",
    "PlannedTest",
    "PlannedValue",
    "PublicationEntry",
    "PublicationPlan",
    "RoundingEntry",
    "RuleEntry",
    "SamplingEntry",
    "MANIFEST_FORMAT",
    "NOT_RECORDED",
    "PLAN_FORMAT",
    "LedgerRecord",
    "LegacyManifest",
    "LevelAccuracy",
    "MeasureComparison",
    "MeasurementAccuracy",
    "Manifest",
    "MoeRange",
    "NoiseSourceEntry",
    "NotRecorded",
    "Preview",
    "QuantileAccuracy",
    "ReleasePlan",
    "StatisticAccuracy",
    "StatisticComparison",
    "accuracy_of",
    "build_manifest",
    "epsilon_for_targets",
    "json_schema",
    "level_blocks",
    "manifest_problems",
    "parse_manifest",
    "plan",
    "preview",
    "statistic_entry",
    "with_outcome",
    "with_selected_keys",
]
