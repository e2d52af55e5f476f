"""Public key domains: the only keys a release ever shows, declared rather than read from data.

A domain is listed in the spec (`values:`), a range of integers (`min:`/`max:`), or a public keys
file (`file:`, CSV or parquet, relative to the spec file), which for several group-by columns lists
the valid key combinations (the clinics of each region), so the released grid has no structurally
impossible cells.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import polars as pl
from pydantic import Discriminator, Field, PrivateAttr, Tag, field_validator, model_validator

from dprelease.errors import SpecError
from dprelease.spec._base import Strict


class ValuesDomain(Strict):
    """Keys listed in the spec itself."""

    values: list[str] | list[int] | list[bool]

    @field_validator("values")
    @classmethod
    def _non_empty_unique(cls, values: list[Any]) -> list[Any]:
        if not values:
            raise ValueError("empty key domain: list at least one public key")
        seen: set[Any] = set()
        for index, value in enumerate(values):
            if value in seen:
                raise ValueError(f"duplicate key {value!r} at position {index}")
            seen.add(value)
        return values


class RangeDomain(Strict):
    """Integer keys min..max inclusive (ages, years, allele counts)."""

    min: int
    max: int

    @model_validator(mode="after")
    def _ordered(self) -> RangeDomain:
        if self.max < self.min:
            raise ValueError(f"empty key domain: max ({self.max}) < min ({self.min})")
        if self.max - self.min >= 10_000_000:
            raise ValueError("key range has 10 million keys or more; declare a coarser domain")
        return self


class FileDomain(Strict):
    """Keys read from a public file (CSV or parquet), relative to the spec file.

    With several group columns the file lists the valid key *combinations* (e.g. the clinics of
    each region), so the released grid has no structurally impossible cells.
    """

    file: str
    column: str | None = Field(
        default=None, description="column in the file (single group column only); default: its name"
    )

    _base_dir: Path | None = PrivateAttr(default=None)  # the YAML's folder; None: working dir

    @property
    def path(self) -> Path:
        """The keys file: relative to the spec's YAML file, else to the working directory."""
        return (self._base_dir or Path.cwd()) / self.file


def _domain_kind(value: Any) -> str | None:
    """The form a domain mapping is written in, by its keys (None: none of the forms)."""
    if isinstance(value, dict):
        forms = {"values": "values", "min": "range", "max": "range", "file": "file"}
        return next((forms[key] for key in value if key in forms), None)
    return type(value).__name__.removesuffix("Domain").lower()


KeyDomain = Annotated[
    Annotated[ValuesDomain, Tag("values")]
    | Annotated[RangeDomain, Tag("range")]
    | Annotated[FileDomain, Tag("file")],
    Discriminator(
        _domain_kind,
        custom_error_type="domain_form",
        custom_error_message="a key domain is `values: [...]`, `min:` and `max:`, or `file:`",
    ),
]


class GroupBy(Strict):
    """One group-by column (`column`) or several released jointly (`columns`, from a keys file)."""

    column: str | None = None
    columns: Annotated[list[str], Field(min_length=2)] | None = None
    domain: KeyDomain

    @model_validator(mode="after")
    def _one_form(self) -> GroupBy:
        if (self.column is None) == (self.columns is None):
            raise ValueError("give either 'column' or 'columns'")
        if self.columns is not None:
            if not isinstance(self.domain, FileDomain):
                raise ValueError(
                    "'columns' needs a public keys file listing the valid combinations"
                )
            if self.domain.column is not None:
                raise ValueError("with 'columns' the keys file uses the same column names")
        return self

    @property
    def key_columns(self) -> list[str]:
        return [self.column] if self.column is not None else list(self.columns or [])

    @property
    def domain_kind(self) -> Literal["values", "range", "file"]:
        if isinstance(self.domain, ValuesDomain):
            return "values"
        return "range" if isinstance(self.domain, RangeDomain) else "file"


def read_domain(group: GroupBy, path: str) -> pl.DataFrame:
    """The keys of one group-by entry as a frame with its key columns; SpecError at `path` (the
    domain's YAML path) for a missing, empty or malformed keys file."""
    domain, first = group.domain, group.key_columns[0]
    if isinstance(domain, ValuesDomain):
        return pl.DataFrame({first: domain.values})
    if isinstance(domain, RangeDomain):
        return pl.DataFrame({first: range(domain.min, domain.max + 1)}, schema={first: pl.Int64})
    file = domain.path
    if not file.is_file():
        raise SpecError(f"{path}.file", f"public keys file {str(file)!r} not found")
    frame = pl.read_parquet(file) if file.suffix == ".parquet" else pl.read_csv(file)
    wanted = group.key_columns
    if domain.column is not None:
        frame = frame.rename({domain.column: first}) if domain.column in frame.columns else frame
    missing = [c for c in wanted if c not in frame.columns]
    if missing:
        raise SpecError(f"{path}.file", f"public keys file has no column {missing[0]!r}")
    keys = frame.select(wanted)
    if keys.height == 0:
        raise SpecError(f"{path}.file", "empty key domain: the public keys file has no keys")
    if keys.null_count().sum_horizontal().item():
        raise SpecError(f"{path}.file", "the public keys file contains an empty key")
    duplicated = keys.is_duplicated()
    if duplicated.any():
        row = keys.filter(duplicated).row(0)
        shown = row[0] if len(row) == 1 else row
        raise SpecError(f"{path}.file", f"duplicate key {shown!r} in the public keys file")
    return keys
