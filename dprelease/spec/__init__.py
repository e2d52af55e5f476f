"""What is released: the release spec, its public key domains and statistics, and the resolved
spec that carries every public fact derived from them (key grid, levels, level shares).

Nothing here reads confidential data: a spec and the public files it names decide the shape of a
release, its sensitivity and its manifest before any row is read. The face exports every kind's
spec model (`_statistics.__all__`, `_ratio.__all__`, `_randomized.__all__`; their contract is
`_statistic`), so a new kind's model is an addition there and in the `Statistic` union
(`_kinds`).

    resolved = load_spec("visits.yaml")        # or resolve(ReleaseSpec(...)) for a spec in Python
    catalog = load_pipeline_specs([specs_dir])  # a pipeline's files: releases, and a problem each
    resolved.spec, resolved.key_grid, resolved.levels, resolved.publish
"""

from dprelease.spec._base import NAME_PATTERN
from dprelease.spec._catalog import (
    SpecCatalog,
    SpecProblem,
    load_pipeline_spec,
    load_pipeline_specs,
    spec_files,
)
from dprelease.spec._domains import (
    FileDomain,
    GroupBy,
    KeyDomain,
    RangeDomain,
    SelectDomain,
    ValuesDomain,
)
from dprelease.spec._kinds import STATISTIC_KINDS, Statistic, output_columns
from dprelease.spec._levels import Levels, level_grid
from dprelease.spec._loading import load_spec, parse_local, parse_spec, resolve
from dprelease.spec._model import PeriodSpec, ReleaseSpec, period_of
from dprelease.spec._publication import (
    COMBINED_SUFFIX,
    FLAG_SUFFIX,
    LOW_RELIABILITY,
    PostProcessing,
    Rule,
    SamplingInput,
    StandardErrorsFile,
    rule_statistics,
    statistic_value_columns,
    tested_columns,
    weighted_count_of,
)
from dprelease.spec._publish import (
    DEFAULT_FORMATS,
    FORMAT_MODULES,
    TABLE_FORMATS,
    PublishSpec,
    TableFormat,
    missing_writer,
)
from dprelease.spec._randomized import *  # noqa: F403 - answers randomized on the device
from dprelease.spec._randomized import __all__ as _RANDOMIZED
from dprelease.spec._ratio import *  # noqa: F403 - the ratios' models
from dprelease.spec._ratio import __all__ as _RATIOS
from dprelease.spec._resolved import ResolvedSpec
from dprelease.spec._statistic import PublishedAs, SpecParts, StatisticKind, StatisticModel
from dprelease.spec._statistics import *  # noqa: F403 - every other kind's model
from dprelease.spec._statistics import __all__ as _STATISTICS
from dprelease.spec._values import (
    HIGH_SUFFIX,
    LEVEL_COLUMN,
    LOW_SUFFIX,
    MAX_ABS_BOUND,
    MAX_GRID_POINTS,
    MOE95_SUFFIX,
    UNDEFINED_SUFFIX,
    UNINFORMATIVE_SUFFIX,
    RowValue,
    SurveyWeight,
    check_bounds,
    check_quantile_levels,
    exact_decimal,
    grid_points,
    weight_steps,
)

__all__ = [
    *_STATISTICS,
    *_RANDOMIZED,
    *_RATIOS,
    "STATISTIC_KINDS",
    "PublishedAs",
    "SpecParts",
    "Statistic",
    "StatisticKind",
    "StatisticModel",
    "output_columns",
    "COMBINED_SUFFIX",
    "DEFAULT_FORMATS",
    "FLAG_SUFFIX",
    "LOW_RELIABILITY",
    "TABLE_FORMATS",
    "Rule",
    "SamplingInput",
    "StandardErrorsFile",
    "TableFormat",
    "rule_statistics",
    "statistic_value_columns",
    "tested_columns",
    "weighted_count_of",
    "missing_writer",
    "FORMAT_MODULES",
    "HIGH_SUFFIX",
    "LEVEL_COLUMN",
    "LOW_SUFFIX",
    "MAX_ABS_BOUND",
    "MAX_GRID_POINTS",
    "MOE95_SUFFIX",
    "NAME_PATTERN",
    "UNDEFINED_SUFFIX",
    "UNINFORMATIVE_SUFFIX",
    "FileDomain",
    "GroupBy",
    "KeyDomain",
    "Levels",
    "PeriodSpec",
    "PostProcessing",
    "PublishSpec",
    "RangeDomain",
    "ReleaseSpec",
    "ResolvedSpec",
    "RowValue",
    "SelectDomain",
    "SpecCatalog",
    "SpecProblem",
    "SurveyWeight",
    "ValuesDomain",
    "check_bounds",
    "check_quantile_levels",
    "exact_decimal",
    "grid_points",
    "level_grid",
    "load_pipeline_spec",
    "load_pipeline_specs",
    "load_spec",
    "parse_local",
    "parse_spec",
    "period_of",
    "resolve",
    "spec_files",
    "weight_steps",
]
