"""Engines turn confidential rows into exact integer aggregates over the public key grid.

What every engine shares lives here: opening the input and checking its *declared* schema
against the spec (before anything is charged), what an engine is asked (`EngineJob`) and the
aggregates it hands back, and choosing an engine by name. The semantics every engine implements
identically (typing, filters, contribution bounds, discretization) are listed in PRIVACY.md; an
engine knows nothing of noise or ledgers, and its output leaves the process only through
`dprelease.publish`.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import polars as pl

from dprelease.errors import (
    INTERRUPTS,
    DataError,
    DPReleaseError,
    InputError,
    SchemaError,
    SpecError,
)
from dprelease.files import irregular
from dprelease.mechanism._accounting import Allocation, Measurement
from dprelease.period import Period
from dprelease.spec import CountStatistic, ResolvedSpec

#: What `release` accepts as confidential input; paths are scanned lazily so large files stream.
DataSource = str | Path | pl.DataFrame | pl.LazyFrame | Any  # Any: pandas.DataFrame, pyarrow.Table


PARQUET_SUFFIXES = (".parquet", ".pq")
CSV_SUFFIXES = (".csv", ".txt")
#: What every published release directory holds (see `dprelease.publish`).
_RELEASE_MARKER = "manifest.json"


def _is_csv(data: DataSource) -> bool:
    return isinstance(data, str | Path) and Path(data).suffix in CSV_SUFFIXES


def dataset_glob(directory: Path) -> str:
    """The parquet files of a directory dataset: at its top level, or in hive partitions
    (`column=value/` subdirectories, nested). Anything else is refused, so a directory is never
    read more widely than a dataset writer (polars, pyarrow, Spark) lays one out, and above all
    a published release (its manifest.json) is never read back as confidential input."""
    entries = list(directory.rglob("*"))
    if any(entry.name == _RELEASE_MARKER for entry in entries):
        raise InputError(
            str(directory),
            "holds published dprelease output (a manifest.json); give the confidential input, "
            "not a release directory",
        )
    if any(entry.is_dir() and "=" not in entry.name for entry in entries):
        raise InputError(
            str(directory),
            "has a subdirectory that is not a hive partition (column=value); a directory input "
            "is a parquet dataset: files at its top level or in column=value subdirectories",
        )
    if not any(entry.suffix == ".parquet" for entry in entries):
        raise InputError(str(directory), "holds no .parquet files")
    return str(directory / "**" / "*.parquet")


def _is_pandas(data: DataSource) -> bool:
    return type(data).__module__.split(".")[0] == "pandas"


def _pandas_text(dtype: Any) -> bool:
    """Whether a pandas dtype declares text: `object` (whatever Python values it holds),
    `string`/`str`, and the dtypes with no polars equivalent (periods, intervals, categoricals of
    such values). Categoricals of numbers, booleans or datetimes are typed by their categories."""
    if getattr(dtype, "name", None) == "category":
        dtype = dtype.categories.dtype
    return dtype.kind == "O"


def _from_pandas(frame: Any) -> pl.DataFrame:
    """A pandas frame in polars types, decided by its dtypes alone, as parquet's schema or a
    polars frame's: its text columns (`_pandas_text`) become String, never a type inferred from
    the values (an object column of numbers would otherwise be a number column or not depending
    on its values, and with it whether a release is refused). Converting text to String is also
    total: polars' own conversion of an object column fails on mixed values."""
    text = [name for name, dtype in frame.dtypes.items() if _pandas_text(dtype)]
    return pl.from_pandas(frame.astype(dict.fromkeys(text, "string")))


#: Appended to a refusal of a pandas column's dtype: how to declare the type the spec needs.
PANDAS_TYPES = (
    "a pandas frame's dtypes are its declared schema, and object and string columns are text: "
    "convert the column first, e.g. df[{column!r}] = pd.to_numeric(df[{column!r}]) for numbers "
    "or pd.to_datetime(df[{column!r}]) for dates"
)


def refuse_irregular(path: Path) -> None:
    """InputError for an input path that is neither a regular file nor a directory (a FIFO,
    a device): reading one could wait forever instead of refusing."""
    if (kind := irregular(path)) is not None:
        raise InputError(
            str(path), f"is {kind}, not a regular file; give a regular file or a directory dataset"
        )


def scan(data: DataSource) -> pl.LazyFrame:
    """Open any supported input as a LazyFrame without reading its rows.

    Text has no declared types, so CSV is read with every column as String (never inferred
    from the values); the engine then parses them non-strictly, so no cell can make reading
    fail or change anything but the noisy values. A pandas frame declares its types by its
    dtypes (`_from_pandas`).
    """
    if isinstance(data, pl.LazyFrame):
        return data
    if isinstance(data, pl.DataFrame):
        return data.lazy()
    if isinstance(data, str | Path):
        path = Path(data)
        if not path.exists():
            raise FileNotFoundError(f"input data {str(path)!r} not found")
        if path.is_dir():
            return pl.scan_parquet(dataset_glob(path), hive_partitioning=True)
        refuse_irregular(path)
        if path.suffix in PARQUET_SUFFIXES:
            return pl.scan_parquet(path)
        if _is_csv(path):
            return pl.scan_csv(
                path,
                infer_schema=False,
                truncate_ragged_lines=True,
                ignore_errors=True,
                encoding="utf8-lossy",
            )
        raise InputError(
            str(path),
            f"not a format dprelease reads: give parquet ({', '.join(PARQUET_SUFFIXES)}), CSV "
            f"({', '.join(CSV_SUFFIXES)}) or a directory of .parquet files",
        )
    if _is_pandas(data):
        return _from_pandas(data).lazy()
    if type(data).__module__.split(".")[0] == "pyarrow":
        table = pl.from_arrow(data)
        if isinstance(table, pl.DataFrame):
            return table.lazy()
    raise InputError(
        type(data).__name__,
        "give a pandas or polars DataFrame, a polars LazyFrame, a pyarrow Table or a path",
    )


@contextmanager
def withholding_engine_errors(what: str) -> Iterator[None]:
    """An engine's messages may quote confidential values (a cell that failed to parse, say):
    keep our own typed errors, replace anything else by a message that names only the step."""
    try:
        yield
    except (DPReleaseError, FileNotFoundError, *INTERRUPTS):
        raise
    except BaseException as exc:  # whatever the engine raises, a Rust panic included
        raise DataError(
            f"{what} failed ({type(exc).__name__}); inspect the confidential input inside the "
            "secure environment (the engine's message is withheld: it may quote data)"
        ) from None


@dataclass(frozen=True)
class Declared:
    """What an input declares about its columns besides their dtypes.

    `untyped` are columns of untyped text, parsed by every role that reads them: only a CSV's
    (None stands for all of its columns); every other input's dtypes are its declared schema.
    `advice` says how to change a column's declared type, added to a refusal of it.
    """

    untyped: frozenset[str] | None = frozenset()
    advice: str | None = None

    def hint(self, column: str) -> str:
        """What to add to a refusal of `column`'s dtype ('' when there is nothing to add)."""
        return "" if self.advice is None else "; " + self.advice.format(column=column)


def declared(data: DataSource) -> Declared:
    """What `data` declares (see `Declared`): a CSV is untyped text; a pandas frame is typed by
    its dtypes, and a refusal says how pandas converts a column."""
    if _is_csv(data):
        return Declared(untyped=None)
    if _is_pandas(data):
        return Declared(advice=PANDAS_TYPES)
    return Declared()


def columns_read(loaded: ResolvedSpec) -> dict[str, str]:
    """Every input column the spec reads, with the YAML path that declares it."""
    spec = loaded.spec
    paths = {}
    if spec.privacy_unit is not None:
        paths[spec.privacy_unit] = "release.privacy_unit"
    for i, group in enumerate(spec.group_by):
        for column in group.key_columns:
            paths[column] = f"release.group_by[{i}].{'column' if group.column else 'columns'}"
    for i, stat in enumerate(spec.statistics):
        if not isinstance(stat, CountStatistic):
            paths.setdefault(stat.column, f"release.statistics[{i}].column")
    for column, path in _weights_read(loaded).items():
        paths.setdefault(column, path)
    if spec.period is not None:
        paths[spec.period.column] = "release.period.column"
    return paths


def _weights_read(loaded: ResolvedSpec) -> dict[str, str]:
    """Every survey weight column the spec reads, with the YAML path that declares it."""
    spec = loaded.spec
    paths: dict[str, str] = {}
    for i, stat in enumerate(spec.statistics):
        if stat.survey_weight is not None:
            paths.setdefault(stat.survey_weight.column, f"release.statistics[{i}].survey_weight")
        elif spec.survey_weight is not None:
            paths.setdefault(spec.survey_weight.column, "release.survey_weight")
    return {column: f"{path}.column" for column, path in paths.items()}


def summed(plan: Allocation) -> list[Measurement]:
    """The measurements that sum a value per row (all but counts of rows), in the plan's order:
    each engine aggregates one column of integer units for each."""
    return [m for m in plan.measurements if not m.counts_rows]


def values_read(plan: Allocation) -> list[str]:
    """The input columns whose values are read (summed values, survey weights and quantiles'
    columns), each once."""
    columns = [
        column
        for m in summed(plan)
        for column in (m.column, m.survey_weight.column if m.survey_weight else None)
        if column is not None
    ]
    return list(dict.fromkeys([*columns, *(q.statistic.column for q in plan.quantiles)]))


def _atomic(dtype: pl.DataType) -> bool:
    return not dtype.is_nested() and dtype != pl.Object


def key_dtype_fits(data: pl.DataType, domain: pl.DataType) -> bool:
    """Whether a typed key column can be typed as its domain's keys: the same dtype, text keys
    from categoricals, integer or float keys from any number (1.0 is the integer key 1)."""
    if data in (domain, pl.Null):
        return True
    if domain == pl.String:
        return data == pl.Categorical or isinstance(data, pl.Enum)
    return (domain.is_integer() or domain.is_float()) and data.is_numeric()


def _parses_as_key(domain: pl.DataType) -> bool:
    """Domains whose keys can be parsed from text."""
    return domain in (pl.String, pl.Boolean) or domain.is_integer() or domain.is_float()


def validate_schema(
    schema: pl.Schema, loaded: ResolvedSpec, declaration: Declared = Declared()
) -> None:
    """Check every column the spec reads against the declared schema, before anything is
    charged or read; errors name the column and its YAML path, never a value.

    The declaration's untyped columns (a CSV's) take any role and are parsed for it.
    """
    spec = loaded.spec
    hint = declaration.hint
    paths = columns_read(loaded)
    missing = next((column for column in paths if column not in schema), None)
    if missing is not None:
        raise SchemaError(missing, "not found in the input", paths[missing])
    for column, path in paths.items():
        if not _atomic(schema[column]):
            raise SchemaError(
                column, f"has dtype {schema[column]}; use a plain column{hint(column)}", path
            )
    text = declaration.untyped
    untyped = set(schema.names()) if text is None else text
    for column in spec.key_columns:
        domain = loaded.key_dtype(column)
        fits = (
            _parses_as_key(domain) if column in untyped else key_dtype_fits(schema[column], domain)
        )
        if not fits:
            raise SchemaError(
                column,
                f"has dtype {schema[column]} but its public key domain holds {domain} keys; "
                f"fix the domain or the column{hint(column)}",
                paths[column],
            )
    numeric: dict[str, str] = {}  # column → who needs numbers in it (the first to read it)
    for stat in spec.statistics:
        if not isinstance(stat, CountStatistic):
            numeric.setdefault(stat.column, f"statistic {stat.name!r} needs a numeric column")
    for column in _weights_read(loaded):
        numeric.setdefault(column, "a survey weight needs a numeric column")
    for column, why in numeric.items():
        if column not in untyped and not (schema[column].is_numeric() or schema[column] == pl.Null):
            raise SchemaError(
                column, f"has dtype {schema[column]} but {why}{hint(column)}", paths[column]
            )
    if spec.period is not None and spec.period.column not in untyped:
        dtype = schema[spec.period.column]
        if not (dtype in (pl.Date, pl.Null) or isinstance(dtype, pl.Datetime)):
            raise SchemaError(
                spec.period.column,
                f"has dtype {dtype}; a period column needs Date or Datetime"
                f"{hint(spec.period.column)}",
                paths[spec.period.column],
            )


@dataclass(frozen=True, repr=False)  # no repr: its facts must not reach a log by accident
class InputSummary:
    """Private facts about the input, for the operator channel and the ledger only: never in
    a file, the manifest, published metadata or a message on the release path (PRIVACY.md).

    Every engine computes the same facts from the columns the spec reads, typed as for the
    aggregation; "the period" is the release's period, or every row for a spec without one.
    """

    rows: int  # rows of the input
    period_rows: int  # rows in the period
    unit_rows: int | None  # rows in the period whose privacy unit is not null (None: no unit)
    keyed_rows: Mapping[str, int]  # per key column: rows in the period whose key converted
    fingerprint: str  # `fingerprint` of the rows in the period

    def warnings(self, release: str, period: str | None) -> list[str]:
        """What looks wrong with an input that was released anyway, for the operator channel
        only: no rows, no rows in the period, or no row of the period with a privacy unit or a
        usable key. A release is made whatever they say (an empty period is a correct release
        of noise around 0)."""
        noise = "the released values are noise around 0"
        if self.rows == 0:
            return [f"release {release!r}: the input has no rows; {noise}. Check the input"]
        where = "" if period is None else f" of period {period}"
        if self.period_rows == 0:
            return [
                f"release {release!r}: no input row is in period {period}; {noise}. Check the "
                "period and the period column"
            ]
        found = []
        if self.unit_rows == 0:
            found.append(
                f"release {release!r}: every row{where} has a null privacy unit; such rows are "
                f"dropped, so {noise}. Check the privacy unit column"
            )
        for column, rows in self.keyed_rows.items():
            if rows == 0:
                found.append(
                    f"release {release!r}: no row{where} has a usable key in column {column!r} "
                    f"(all null, or not of the domain's key type); such rows are dropped, so "
                    f"{noise}"
                )
        return found


def fingerprint(scheme: str, rows: int, hash_sum: int) -> str:
    """The input fingerprint the ledger keeps: "<scheme>:<sha256>" of the number of rows in the
    period and the sum of a fixed-seed hash of each row (the columns the spec reads, typed), so
    row order does not matter. `scheme` names the engine and its hash function's version; two
    fingerprints are comparable only within one scheme."""
    digest = hashlib.sha256(f"{rows}:{hash_sum}".encode()).hexdigest()
    return f"{scheme}:{digest}"


@dataclass(frozen=True)
class ExactAggregates:
    """Pre-noise aggregates over the full public key grid; internal only, never published.

    `values` holds one Int128 series per measurement name (rows for a count, the sum of integer
    units for a sum), aligned with `keys`, the public key grid (no columns when ungrouped:
    then every series has one cell). `histograms` holds, per quantile statistic, the rows of
    each observed (cell, grid point) pair (Int64 columns `cell`, the row of `keys`; `point`,
    the grid index; `rows`). `summary` is the private input summary, computed in the same pass.
    """

    keys: pl.DataFrame
    values: Mapping[str, pl.Series]
    summary: InputSummary
    histograms: Mapping[str, pl.DataFrame] = field(default_factory=dict)

    def of(self, measurement: Measurement) -> pl.Series:
        return self.values[measurement.name]


@dataclass(frozen=True)
class EngineJob:
    """What one aggregation is asked of an engine, the same for each of its steps (`check`,
    `aggregate`, `summarize`): the confidential input, the resolved spec (columns, key grid,
    contribution bounds), its allocation (which measurements and quantiles to aggregate) and
    the period whose rows count (None: every row)."""

    data: DataSource
    resolved: ResolvedSpec
    allocation: Allocation
    period: Period | None


class Engine(Protocol):
    """An execution backend; every engine implements the same semantics (PRIVACY.md)."""

    name: str

    def check(self, job: EngineJob) -> None:
        """Everything that can be checked without reading a row; raises a typed error."""

    def aggregate(self, job: EngineJob, salt: int) -> ExactAggregates:
        """Exact aggregates and the input summary, in one pass over the input; contribution
        bounding hashes rows with `salt` (fresh per release)."""

    def summarize(self, job: EngineJob) -> InputSummary:
        """The input summary alone, for a re-run that returns a stored release."""


def _polars() -> Engine:
    from dprelease.mechanism.engines.polars import PolarsEngine

    return PolarsEngine()


def _spark() -> Engine:
    try:
        from dprelease.mechanism.engines.spark import SparkEngine
    except ModuleNotFoundError as missing:
        raise SpecError(
            "engine", f"the spark engine needs {missing.name}: pip install 'dprelease[spark]'"
        ) from None
    return SparkEngine()


#: Engines by name; each is imported only when chosen.
ENGINES: dict[str, Callable[[], Engine]] = {"polars": _polars, "spark": _spark}


def get_engine(name: str) -> Engine:
    """The engine called `name`; SpecError naming the choices otherwise."""
    if name not in ENGINES:
        raise SpecError("engine", f"unknown engine {name!r}; choose one of {sorted(ENGINES)}")
    return ENGINES[name]()


def new_salt() -> int:
    """A fresh 64-bit salt from the OS CSPRNG: which rows a unit keeps is random, not file order,
    and cannot be predicted from the data."""
    return secrets.randbits(64)
