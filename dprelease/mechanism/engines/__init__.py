"""Engines turn confidential rows into exact integer aggregates over the public key grid.

Every engine translates one row plan (`_plan.RowPlan`: the steps, the nulls rule, the bounds,
the granularities, grid points and contribution bounds, all decided from public facts) into its
own operations: polars in one process (`polars.py`), Apache Spark where the data live
(`spark.py`). What they share: opening the input and its declared types (`_inputs`), checking
the declared schema against the plan before anything is charged (`_schema`), and the contract
(`_contract`: `EngineJob` in, `ExactAggregates` and the private `InputSummary` out); engines by
name (`_registry`) sit above the engines they name. PRIVACY.md lists the semantics every engine
implements identically; an engine knows nothing of noise or ledgers.
"""

from dprelease.mechanism.engines._contract import (
    Engine,
    EngineJob,
    ExactAggregates,
    InputSummary,
    fingerprint,
    new_salt,
)
from dprelease.mechanism.engines._inputs import (
    CSV_SUFFIXES,
    PANDAS_TYPES,
    PARQUET_SUFFIXES,
    DataSource,
    Declared,
    dataset_glob,
    declared,
    refuse_irregular,
    scan,
    withholding_engine_errors,
)
from dprelease.mechanism.engines._plan import *  # noqa: F403 - the row plan's vocabulary
from dprelease.mechanism.engines._plan import __all__ as _VOCABULARY
from dprelease.mechanism.engines._registry import ENGINES, get_engine
from dprelease.mechanism.engines._schema import validate_schema

__all__ = [
    *_VOCABULARY,
    "CSV_SUFFIXES",
    "ENGINES",
    "PANDAS_TYPES",
    "PARQUET_SUFFIXES",
    "DataSource",
    "Declared",
    "Engine",
    "EngineJob",
    "ExactAggregates",
    "InputSummary",
    "dataset_glob",
    "declared",
    "fingerprint",
    "get_engine",
    "new_salt",
    "refuse_irregular",
    "scan",
    "validate_schema",
    "withholding_engine_errors",
]
