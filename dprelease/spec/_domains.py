"""Key domains: the only keys a release ever shows, declared rather than read from data, or
selected from the data by a DP mechanism.

A domain is listed in the spec (`values:`), a range of integers (`min:`/`max:`), or a public keys
file (`file:`, CSV or parquet, relative to the spec file), which for several group-by columns lists
the valid key combinations (the clinics of each region), so the released grid has no structurally
impossible cells. Where no public list exists (diagnosis codes, products, free-text categories),
`select: true` releases the keys that enough distinct units hold, decided by DP key selection
(`dprelease.mechanism.selection`, docs/selection.md): the released key set is itself a DP output.

A keys file's content is published (its keys are the rows of the released table), so a spec may
read one only from its own directory (or below it) unless the domain says `outside_spec_dir:
true`: a mistyped or hostile path (`../../data/patients.parquet`) would otherwise publish
whatever file it names. A keys file is read under the rule for confidential input, since it
may be one by mistake: refusals name the spec's YAML path and the file, never its content.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import polars as pl
from pydantic import Discriminator, Field, PrivateAttr, Tag, field_validator, model_validator

from dprelease.errors import INTERRUPTS, SpecError
from dprelease.files import irregular
from dprelease.spec._base import Positive, Strict

#: Why a reader's own message is left out of a refusal of a keys file.
_WITHHELD = "the reader's message is withheld: a keys file may be confidential"


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
    outside_spec_dir: bool = Field(
        default=False,
        description="read the file even where it lies outside the spec's directory (an absolute "
        "path, `..`, a symbolic link out of it); part of the spec's identity only when true",
    )

    _base_dir: Path | None = PrivateAttr(default=None)  # the YAML's folder; None: working dir

    @property
    def base(self) -> Path:
        """The spec's directory: the YAML file's folder, else the working directory."""
        return self._base_dir or Path.cwd()

    @property
    def path(self) -> Path:
        """The keys file: relative to the spec's YAML file, else to the working directory."""
        return self.base / self.file


#: What a key may be in `always:` (one column) or in one of its lists (joint columns).
Key = str | int | bool
#: The selection rules a spec may name (`rule:`), as the manifest's `mechanism` names them.
SELECT_RULES = ("optimal", "gaussian_threshold", "laplace_threshold")
SelectRule = Literal["optimal", "gaussian_threshold", "laplace_threshold"]
#: Cap on G: a unit's keys are bounded by a salted hash per unit, and the weights of the weighted
#: policy have to stay exact integers well inside the samplers' range.
MAX_KEYS_PER_UNIT = 10_000


class SelectDomain(Strict):
    """Keys selected from the data: released only where a noisy count of the distinct units
    holding them passes a threshold (docs/selection.md). Needs a δ in the scope's budget."""

    select: bool = Field(description="true: select the keys from the data by DP key selection")
    always: list[Key] | list[list[Key]] | None = Field(
        default=None,
        description="public keys released whatever the data (a list of keys; with 'columns', a "
        "list of key combinations); they are not selected and spend nothing",
    )
    max_keys_per_unit: Annotated[int, Field(ge=1, le=MAX_KEYS_PER_UNIT)] = Field(
        default=1,
        description="G: the most keys one unit counts towards (each unit keeps G of its keys, "
        "chosen by a salted hash); the selection's noise and threshold grow with G",
    )
    policy: Literal["per_key", "weighted"] | None = Field(
        default=None,
        description="how a unit holding several keys counts: per_key (1 per key, budget split "
        "over G keys) or weighted (one unit of weight spread over its keys); default: chosen "
        "from G and the scope's measure (docs/selection.md)",
    )
    weight: Positive | None = Field(
        default=None,
        description="the selection's share of the release's ε (or ρ), in proportion to the "
        "statistics' weights (default 1, like a statistic)",
    )
    rule: SelectRule | None = Field(
        default=None,
        description="how a key's fate is drawn from its count of units: optimal (the optimal "
        "rule, PipelineDP's truncated_geometric, with Δ-scaling), gaussian_threshold or "
        "laplace_threshold; auto (or left out): chosen by the plan (docs/selection.md). Part of "
        "the spec's identity only when set to a rule",
    )

    @field_validator("rule", mode="before")
    @classmethod
    def _known_rule(cls, rule: Any) -> Any:
        """One line saying what to write, and `auto` read as unset: one spelling per spec (the
        ledger keys re-runs by the spec's hash)."""
        if rule is None or rule == "auto":
            return None
        if rule not in SELECT_RULES:
            hint = " (PipelineDP's truncated_geometric is the optimal rule here)" * (
                rule == "truncated_geometric"
            )
            raise ValueError(f"unknown rule {rule!r}{hint}: write auto, " + ", ".join(SELECT_RULES))
        return rule

    @field_validator("select")
    @classmethod
    def _selects(cls, select: bool) -> bool:
        if not select:
            raise ValueError(
                "select: false is no key domain: list the public keys (values: [...], min: and "
                "max:, or file:), or set select: true to select keys from the data"
            )
        return select

    @field_validator("always")
    @classmethod
    def _unique(cls, always: list[Any] | None) -> list[Any] | None:
        if always is None:
            return None
        if not always:
            raise ValueError("empty list: leave 'always' out, or list at least one public key")
        seen: set[Any] = set()
        for index, key in enumerate(always):
            marker = tuple(key) if isinstance(key, list) else key
            if marker in seen:
                raise ValueError(f"duplicate key {key!r} at position {index}")
            seen.add(marker)
        return always


def _domain_kind(value: Any) -> str | None:
    """The form a domain mapping is written in, by its keys (None: none of the forms)."""
    if isinstance(value, dict):
        forms = {
            "values": "values",
            "min": "range",
            "max": "range",
            "file": "file",
            "select": "select",
        }
        return next((forms[key] for key in value if key in forms), None)
    return type(value).__name__.removesuffix("Domain").lower()


KeyDomain = Annotated[
    Annotated[ValuesDomain, Tag("values")]
    | Annotated[RangeDomain, Tag("range")]
    | Annotated[FileDomain, Tag("file")]
    | Annotated[SelectDomain, Tag("select")],
    Discriminator(
        _domain_kind,
        custom_error_type="domain_form",
        custom_error_message=(
            "a key domain is `values: [...]`, `min:` and `max:`, `file:`, or `select: true` "
            "(keys selected from the data by DP)"
        ),
    ),
]

#: The refusal of a group-by entry without a domain: what to give, in one line.
MISSING_DOMAIN = (
    "required: list the public keys (values: [...], min: and max:, or file:), or let DP select "
    "them from the data with select: true (docs/selection.md)"
)


class GroupBy(Strict):
    """One group-by column (`column`) or several released jointly (`columns`, from a keys file)."""

    column: str | None = None
    columns: Annotated[list[str], Field(min_length=2)] | None = None
    domain: KeyDomain

    @model_validator(mode="before")
    @classmethod
    def _has_domain(cls, data: Any) -> Any:
        """A missing domain is refused saying what to give (pydantic's own words are only
        "Field required")."""
        if isinstance(data, dict) and data.get("domain") is None:
            raise SpecError("domain", MISSING_DOMAIN)
        return data

    @model_validator(mode="after")
    def _one_form(self) -> GroupBy:
        if (self.column is None) == (self.columns is None):
            raise ValueError("give either 'column' or 'columns'")
        if isinstance(self.domain, SelectDomain):
            self._check_always(self.domain.always)
        elif self.columns is not None:
            if not isinstance(self.domain, FileDomain):
                raise ValueError(
                    "'columns' needs a public keys file listing the valid combinations, or "
                    "select: true"
                )
            if self.domain.column is not None:
                raise ValueError("with 'columns' the keys file uses the same column names")
        return self

    def _check_always(self, always: list[Any] | None) -> None:
        """One column: `always` lists keys; joint columns: lists of one key per column."""
        if always is None:
            return
        width = len(self.key_columns)
        for index, key in enumerate(always):
            joint = isinstance(key, list)
            if (width == 1 and joint) or (width > 1 and (not joint or len(key) != width)):
                what = "a key" if width == 1 else f"a list of {width} keys, one per column"
                raise SpecError(f"domain.always[{index}]", f"must be {what}")

    @property
    def key_columns(self) -> list[str]:
        return [self.column] if self.column is not None else list(self.columns or [])

    @property
    def selects(self) -> bool:
        """Whether this entry's keys are selected from the data (not a public list)."""
        return isinstance(self.domain, SelectDomain)

    @property
    def domain_kind(self) -> Literal["values", "range", "file"]:
        """The form of a public domain, as the manifest names it. A selected domain has none: its
        manifest entry is the selection's (docs/selection.md), so asking is an error."""
        if isinstance(self.domain, SelectDomain):
            raise ValueError("a selected key domain is stated by its selection, not a form")
        if isinstance(self.domain, ValuesDomain):
            return "values"
        return "range" if isinstance(self.domain, RangeDomain) else "file"


def check_selected_margins(group_by: list[GroupBy], margins: list[list[str]] | None) -> None:
    """Refuse margins with a selected column: a margin that adds up over it would total only
    the selected keys, which is not the margin of the data (a key held by too few units is
    absent), and one that keeps it would have a level grid, and so a sensitivity, that depends
    on which keys were selected. A release with selected keys has its cells only."""
    selected = [c for group in group_by if group.selects for c in group.key_columns]
    if selected and margins:
        raise SpecError(
            "margins",
            f"margins are not released with keys selected from the data ({selected[0]!r} has "
            "select: true): a margin would total only the selected keys; leave margins out, or "
            "give that column a public domain",
        )


def _always_keys(group: GroupBy, domain: SelectDomain) -> pl.DataFrame:
    """The keys a selected domain releases whatever the data (its `always:` list, possibly
    none), typed: the released table's keys in a selected column have this dtype (text unless
    `always` lists integers or booleans), and the selection adds the keys it selects."""
    columns = group.key_columns
    rows = domain.always or []
    if len(columns) == 1:
        values = {columns[0]: rows}
    else:
        values = {
            c: [row[i] for row in rows if isinstance(row, list)] for i, c in enumerate(columns)
        }
    frame = pl.DataFrame(values, strict=False)
    return frame.cast({c: pl.String for c in columns if frame.schema[c] == pl.Null})


def read_domain(group: GroupBy, path: str) -> pl.DataFrame:
    """The keys of one group-by entry as a frame with its key columns; SpecError at `path` (the
    domain's YAML path) for a missing, empty or malformed keys file."""
    domain, first = group.domain, group.key_columns[0]
    if isinstance(domain, SelectDomain):
        return _always_keys(group, domain)
    if isinstance(domain, ValuesDomain):
        return pl.DataFrame({first: domain.values})
    if isinstance(domain, RangeDomain):
        return pl.DataFrame({first: range(domain.min, domain.max + 1)}, schema={first: pl.Int64})
    frame = _read_keys_file(domain, f"{path}.file")
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
    if keys.is_duplicated().any():
        raise SpecError(
            f"{path}.file",
            "the public keys file lists a key more than once; list each key (combination) once "
            "(the key is not shown: a keys file may be confidential)",
        )
    return keys


def _read_keys_file(domain: FileDomain, where: str) -> pl.DataFrame:
    """The keys file of `domain` as a frame, its types inferred from every row (so no late
    row can fail the parse); SpecError at `where` (the domain's YAML path) naming the file and
    never a byte of it: for a path outside the spec's directory (unless allowed), a missing or
    irregular file, an empty one, CSV that is not UTF-8 or not well-formed, unreadable parquet."""
    file = domain.path
    named = f"public keys file {str(file)!r}"
    base = domain.base.resolve()
    if not domain.outside_spec_dir and not file.resolve().is_relative_to(base):
        raise SpecError(
            where,
            f"{named} is outside the spec's directory {str(base)!r}, and its keys would be "
            "published: keep keys files beside the spec (or below it), or set "
            "`outside_spec_dir: true` on this domain if that file is public",
        )
    if (kind := irregular(file)) is not None:
        raise SpecError(where, f"{named} is {kind}, not a regular file")
    if not file.exists():
        raise SpecError(where, f"{named} not found")
    content = file.read_bytes()
    if not content:
        raise SpecError(where, f"{named} is empty; it needs a header and at least one key")
    if file.suffix == ".parquet":
        return _parsed(lambda: pl.read_parquet(io.BytesIO(content)), where, f"{named} is not "
                       "a readable parquet file")  # fmt: skip
    try:
        content.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(where, f"{named} is not UTF-8 text; save it as UTF-8 CSV") from None
    return _parsed(
        lambda: pl.read_csv(io.BytesIO(content), infer_schema_length=None),
        where,
        f"{named} is not a well-formed CSV file (check its quoting and that every line has "
        "the header's number of fields)",
    )


def _parsed(read: Callable[[], pl.DataFrame], where: str, problem: str) -> pl.DataFrame:
    """`read()`, with any failure of the reader (a Rust panic included) as one SpecError."""
    try:
        frame = read()
    except INTERRUPTS:
        raise
    except BaseException as exc:  # whatever the reader raises; its message may quote the file
        raise SpecError(where, f"{problem} ({type(exc).__name__}; {_WITHHELD})") from None
    return frame
