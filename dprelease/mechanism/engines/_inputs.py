"""The confidential input as an engine opens it: every supported source as a lazy polars frame,
its columns typed by what the input declares (never by its values), and an engine's own error
messages withheld (they may quote data)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from dprelease.errors import INTERRUPTS, DataError, DPReleaseError, InputError
from dprelease.files import irregular

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
        if path.is_dir():  # a file's column no other needs is no reason to fail the read
            return pl.scan_parquet(
                dataset_glob(path), hive_partitioning=True, extra_columns="ignore"
            )
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
