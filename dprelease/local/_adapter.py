"""Everything the local path borrows from the central machinery, in this one module.

The randomizers and estimators stand alone; a release of randomized answers reuses what a
central release already has: the bits of a `NoiseSource`, the public key grid of a spec's
group-by (read and checked as a central spec's, margins included), opening an input, checking
its declared schema and typing its keys as the engines do (polars and Spark), and the margin a
central count states (for the planner).
When local releases become a statistic kind of the central spec, this module is what changes.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from dprelease.errors import SpecError
from dprelease.files import error_at_path
from dprelease.mechanism.engines import (
    DataSource,
    Declared,
    RowPlan,
    declared,
    scan,
    validate_schema,
    withholding_engine_errors,
)
from dprelease.mechanism.engines.polars import as_key as polars_key
from dprelease.mechanism.noise import (
    NoiseSource,
    laplace_moe95,
    laplace_variance,
)
from dprelease.mechanism.randomized import byte_reader
from dprelease.spec import FileDomain, ReleaseSpec, ResolvedSpec, resolve

if TYPE_CHECKING:
    from types import ModuleType

    import polars as pl
    from pyspark.sql import DataFrame as SparkFrame

    from dprelease.local._spec import LocalReleaseSpec

__all__ = [
    "DataSource",
    "Declared",
    "NoiseSource",
    "byte_reader",
    "central_count_accuracy",
    "declared",
    "key_plan",
    "key_structure",
    "polars_key",
    "scan",
    "spark_engine",
    "spark_input",
    "validate_schema",
    "withholding_engine_errors",
]


def key_structure(release: LocalReleaseSpec, base: Path | None) -> ResolvedSpec:
    """The public key grid (and levels, with margins) of a local release's group-by, resolved as
    a central spec's: the same domains, keys files and refusals at the same YAML paths."""
    for group in release.group_by:
        if isinstance(group.domain, FileDomain):
            group.domain._base_dir = base
    try:  # a count of respondents stands for the local statistic until it is a kind of its own
        central = ReleaseSpec.model_validate(
            {
                "name": release.name,
                "source": release.source,
                "group_by": release.group_by,
                "margins": release.margins,
                "statistics": [{"name": "_local_respondents_", "kind": "count"}],
            }
        )
    except ValidationError as exc:  # the margins' checks, at the release's YAML path
        raise error_at_path(exc, "release", SpecError) from None
    return resolve(central)


def key_plan(structure: ResolvedSpec) -> RowPlan:
    """The row plan of the key grid alone (rows per cell, no values read): what the input's
    schema is checked against and how the engines type its keys, as for a central count."""
    return RowPlan.of(structure, None, [], ["_local_respondents_"], [], [])


def spark_input(data: DataSource) -> tuple[SparkFrame, pl.Schema]:
    """The input as a Spark DataFrame and its schema in polars' types (the Spark engine's
    reader and schema mapping)."""
    spark = spark_engine()  # its reader and schema mapping, as a central release reads
    frame = spark.read(data)
    return frame, spark.polars_schema(frame.schema)


def spark_engine() -> ModuleType:
    """The Spark engine's module, for its key typing (`as_key`, `key_types`), public domains
    on Spark (`domain_frame`) and column quoting (`column`): the same keys as a central
    release's."""
    from dprelease.mechanism.engines import spark

    return spark


def central_count_accuracy(epsilon: Fraction) -> tuple[float, int]:
    """The standard deviation and 95% margin of a count the central path releases at ε (exact
    discrete Laplace noise of scale 1/ε: one person changes one count by one)."""
    scale = 1 / epsilon
    return laplace_variance(scale) ** 0.5, laplace_moe95(scale)
