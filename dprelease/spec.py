"""Release specs: what one published table contains, validated before anything touches data.

A spec is the public half of a release: the group-by columns with their *public* key domains,
the statistics with their declared bounds, and the contribution bounds per privacy unit. Everything
the sensitivity and the manifest say comes from here, never from the data.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple

import polars as pl
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from dprelease._readable_errors import ReadableErrors
from dprelease.errors import SpecError
from dprelease.profile import Neighbours
from dprelease.yaml_files import Location, error_at_path, read_sections


class _Strict(ReadableErrors):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ValuesDomain(_Strict):
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


class RangeDomain(_Strict):
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


class FileDomain(_Strict):
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


class GroupBy(_Strict):
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


class StatisticKind(StrEnum):
    COUNT = "count"
    SUM = "sum"
    MEAN = "mean"


#: Names a spec gives (release, statistics). Internal measurement names contain ':' (see
#: `accounting`), which this pattern forbids, so no spec can name a column like them.
NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
#: Suffix of the generated margin-of-error column of a statistic: the half-width of its 95%
#: interval (value ± margin).
MOE95_SUFFIX = "_moe95"
#: Suffix of a mean's flag column: true where the noisy count is ≤ 0 and the mean is null.
UNDEFINED_SUFFIX = "_undefined"
#: The column that names each row's level in a release with margins ("region,clinic", "total").
LEVEL_COLUMN = "level"
#: Largest |bound| a sum or mean may declare: beyond 2^53 a float no longer holds every integer,
#: and the noise scale and variance stated in the manifest could overflow.
MAX_ABS_BOUND = 2.0**53
#: Field names of earlier versions, refused with a pointer to the new name.
_RENAMED = {"target_ci95": "target_moe95", "ci95_columns": "moe95_columns"}

_Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class _Renamed(_Strict):
    """Refuses a field of an earlier version by naming its successor (not a generic 'extra')."""

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for old, new in _RENAMED.items():
                if old in data:
                    raise SpecError(old, f"{old!r} is now called {new!r}")
        return data


class _StatisticBase(_Renamed):
    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    kind: StatisticKind  # each kind narrows it to its own (the union's tag)
    weight: _Positive | None = Field(
        default=None, description="share of ε in proportion to the weights (default 1)"
    )


class CountStatistic(_StatisticBase):
    """Rows per cell (after contribution bounding)."""

    kind: Literal[StatisticKind.COUNT] = StatisticKind.COUNT
    target_moe95: _Positive | None = Field(
        default=None, description="wanted 95% margin of error: splits ε by accuracy targets"
    )


class _Bounded(_StatisticBase):
    """A statistic of a column's values, which need declared bounds (they set Δ)."""

    column: str
    lower: float
    upper: float
    granularity: _Positive | None = Field(
        default=None,
        description="unit of discretization; default: a power of two 2^20 below the noise scale",
    )

    @model_validator(mode="before")
    @classmethod
    def _declared(cls, data: Any) -> Any:
        if isinstance(data, dict):
            kind = cls.model_fields["kind"].default.value
            if "column" not in data:
                raise ValueError(f"{kind} needs 'column'")
            if "lower" not in data or "upper" not in data:
                raise ValueError(f"{kind} needs declared 'lower' and 'upper' bounds")
        return data

    @model_validator(mode="after")
    def _bounds(self) -> _Bounded:
        if not (math.isfinite(self.lower) and math.isfinite(self.upper)):
            raise ValueError("bounds must be finite numbers")
        if max(abs(self.lower), abs(self.upper)) > MAX_ABS_BOUND:
            raise ValueError(
                "bounds must lie within ±2^53 (about ±9.007e15); express the column in larger "
                "units (thousands, millions)"
            )
        if self.lower >= self.upper:
            raise ValueError(f"lower ({self.lower}) must be < upper ({self.upper})")
        return self


class SumStatistic(_Bounded):
    """The sum per cell of a column clamped to [lower, upper]."""

    kind: Literal[StatisticKind.SUM] = StatisticKind.SUM
    target_moe95: _Positive | None = Field(
        default=None, description="wanted 95% margin of error: splits ε by accuracy targets"
    )

    @model_validator(mode="after")
    def _one_split(self) -> SumStatistic:
        if self.weight is not None and self.target_moe95 is not None:
            raise ValueError("give either 'weight' or 'target_moe95', not both")
        return self


class MeanStatistic(_Bounded):
    """Noisy sum / noisy count per cell (post-processing). It reuses the release's count and a
    sum of the same column and bounds, and spends ε only on what it cannot reuse."""

    kind: Literal[StatisticKind.MEAN] = StatisticKind.MEAN

    @model_validator(mode="before")
    @classmethod
    def _no_target(cls, data: Any) -> Any:
        if isinstance(data, dict) and "target_moe95" in data:
            raise SpecError(
                "target_moe95",
                "a mean takes no target_moe95 (its margin depends on each cell's count); target "
                "the count and a sum of the same column and bounds, which the mean reuses",
            )
        return data


#: One released column; `kind` says which (the YAML's `kind:` key).
Statistic = Annotated[CountStatistic | SumStatistic | MeanStatistic, Field(discriminator="kind")]
STATISTIC_KINDS = tuple(kind.value for kind in StatisticKind)


@dataclass(frozen=True)
class MeanReuse:
    """What a mean divides: the names of the statistics it reuses (None: a measurement of its
    own, paid from its share)."""

    count: str | None
    sum: str | None

    @property
    def spends(self) -> bool:
        return self.count is None or self.sum is None


class PeriodSpec(_Strict):
    """How a release is cut into reporting periods (one release per period)."""

    column: str
    every: Literal["month"] = "month"
    composition: Literal["sequential", "parallel"] = Field(
        default="sequential",
        description="sequential: the same people recur across periods, periods share one budget; "
        "parallel: periods hold disjoint people, each period gets the full budget",
    )


class Month(NamedTuple):
    """One reporting period of a monthly spec."""

    year: int
    month: int


_MONTH = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")


def resolve_period(period_spec: PeriodSpec | None, period: str | None) -> Month | None:
    """The month a release covers; SpecError unless the period and the spec agree.

    A spec with `period:` needs one, and its rows are always filtered to it. A spec without
    `period:` refuses one: its release covers every row, so a made-up period would only let the
    same rows be released (and charged) again under another name.
    """
    if period_spec is None:
        if period is not None:
            raise SpecError(
                "period",
                "this spec has no 'period:' section, so its release covers every row; "
                "leave the period out (or add 'period:' to the spec)",
            )
        return None
    if period is None:
        raise SpecError("period", "this spec is released per period: give a period (YYYY-MM)")
    found = _MONTH.match(period)
    if found is None:
        raise SpecError("period", f"{period!r} is not a month of the form YYYY-MM")
    return Month(int(found.group(1)), int(found.group(2)))


class PostProcessing(_Renamed):
    """Free by DP's post-processing property: applied to noisy values only."""

    nonnegative: bool = True
    decimals: Annotated[int, Field(ge=0, le=12)] | None = Field(
        default=None,
        description="decimals of sums and means; default: the place of the second significant "
        "digit of their 95% margin of error (the precision the noise leaves)",
    )
    moe95_columns: bool = True


class ReleaseSpec(_Strict):
    """One published table: the fields of the YAML's `release:` section.

    Build it from YAML (`ReleaseSpec.from_yaml`) or in Python with the same fields; a keys file
    of a `file:` domain is read relative to the YAML file (or the working directory).
    """

    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    source: str
    privacy_unit: str | None = None
    max_rows_per_unit: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="R: rows kept per unit; required with a privacy unit unless both "
        "max_groups_per_unit and max_rows_per_group are set (then R defaults to their product)",
    )
    max_groups_per_unit: Annotated[int, Field(ge=1)] | None = None
    max_rows_per_group: Annotated[int, Field(ge=1)] | None = None
    neighbours: Neighbours | None = None
    group_by: list[GroupBy] = Field(default_factory=list)
    margins: list[list[str]] | None = Field(
        default=None,
        description="margins of the group-by released with the cells, each a list of group-by "
        "columns ([] is the grand total); every level is measured and the released table is "
        "made consistent: each margin is the sum of its released cells",
    )
    level_weights: list[_Positive] | None = Field(
        default=None,
        description="how each statistic's ε is split over the levels, in proportion: the cells "
        "first, then each margin in order (default: equal)",
    )
    statistics: Annotated[list[Statistic], Field(min_length=1)]
    period: PeriodSpec | None = None
    postprocess: PostProcessing = PostProcessing()
    engine: Literal["polars", "spark"] | None = Field(
        default=None,
        description="where the exact aggregation runs (default polars); every engine computes "
        "the same release, so it is not part of the spec hash",
    )

    @classmethod
    def from_yaml(cls, path: str | Path) -> ReleaseSpec:
        """The spec in a YAML file's `release:` section; SpecError naming the YAML path."""
        return load_spec(path).spec

    def to_yaml(self) -> str:
        """The spec as YAML (`release:` section), as `from_yaml` and the pipeline read it."""
        return yaml.safe_dump(
            {"release": self.model_dump(mode="json", exclude_none=True)}, sort_keys=False
        )

    @field_validator("margins")
    @classmethod
    def _no_margins_is_none(cls, margins: list[list[str]] | None) -> list[list[str]] | None:
        """`margins: []` means no margins, and is the same spec (and hash) as leaving it out."""
        return margins or None

    @model_validator(mode="after")
    def _consistent(self) -> ReleaseSpec:
        self._check_contribution_bounds()
        names = [s.name for s in self.statistics]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate statistic names {dupes}")
        columns = self.key_columns
        if len(set(columns)) != len(columns):
            raise ValueError("a group-by column is listed twice")
        self._check_margins()
        outputs = (
            ([LEVEL_COLUMN] if self.margins else [])
            + columns
            + [name for s in self.statistics for name in output_columns(s)]
        )
        clash = sorted({n for n in outputs if outputs.count(n) > 1})
        if clash:
            raise ValueError(
                f"output column names {clash} would repeat: statistic names, group-by columns "
                f"and the generated '<statistic>{MOE95_SUFFIX}' (and a mean's "
                f"'<statistic>{UNDEFINED_SUFFIX}', and with margins '{LEVEL_COLUMN}') columns "
                "must all differ; rename the statistic"
            )
        self._check_split()
        return self

    def _check_margins(self) -> None:
        """Margins are distinct proper subsets of the group-by columns, and form at most two
        nested chains: then an integer rounding that keeps every margin the sum of its cells
        always exists (see `consistency.round_additive`)."""
        if self.margins is None:
            if self.level_weights is not None:
                raise SpecError("level_weights", "level_weights split ε over margins: add them")
            return
        keys = self.key_columns
        if not keys:
            raise SpecError(
                "margins", "margins need group_by (an ungrouped release is its own grand total)"
            )
        sets: list[frozenset[str]] = []
        for index, margin in enumerate(self.margins):
            unknown = [column for column in margin if column not in keys]
            if unknown:
                raise SpecError(
                    f"margins[{index}]",
                    f"{unknown[0]!r} is not a group-by column ({', '.join(keys)})",
                )
            if len(set(margin)) != len(margin):
                raise SpecError(f"margins[{index}]", "a column is listed twice")
            if set(margin) == set(keys):
                raise SpecError(
                    f"margins[{index}]",
                    "these are all the group-by columns: the cells are always released; list "
                    "only coarser margins",
                )
            if frozenset(margin) in sets:
                raise SpecError(f"margins[{index}]", "this margin is listed twice")
            sets.append(frozenset(margin))
        for a, b, c in itertools.combinations(range(len(sets)), 3):
            if all(
                not (sets[i] <= sets[j] or sets[j] <= sets[i]) for i, j in ((a, b), (a, c), (b, c))
            ):
                raise SpecError(
                    "margins",
                    f"margins {self.margins[a]}, {self.margins[b]} and {self.margins[c]} cross "
                    "(none holds another's columns): integer counts that keep every margin the "
                    "sum of its cells are guaranteed only for at most two nested chains of "
                    "margins; drop one or nest them",
                )
        levels = len(self.margins) + 1
        if self.level_weights is not None and len(self.level_weights) != levels:
            raise SpecError(
                "level_weights",
                f"give one weight per level: {levels} (the cells, then each margin in order)",
            )

    def _check_split(self) -> None:
        """Accuracy targets split ε only if every statistic that spends has one; a mean that
        reuses everything spends nothing, so it takes no weight either."""
        targeted = [
            s.target_moe95 is not None
            for s in self.statistics
            if isinstance(s, CountStatistic | SumStatistic)
        ]
        if any(targeted) and not all(targeted):
            raise ValueError(
                "either every count and sum has 'target_moe95' (accuracy-first split) "
                "or none has (split by weights)"
            )
        for index, stat in enumerate(self.statistics):
            if not isinstance(stat, MeanStatistic):
                continue
            reuse = self.reuse_of(stat)
            if reuse.spends and any(targeted):
                raise SpecError(
                    f"statistics[{index}]",
                    "with accuracy targets a mean must reuse a count and a sum of its column "
                    "and bounds (it has no margin of its own to target): add them",
                )
            if not reuse.spends and stat.weight is not None:
                raise SpecError(
                    f"statistics[{index}].weight",
                    f"this mean reuses {reuse.count!r} and {reuse.sum!r} and spends no ε of its "
                    "own; remove 'weight'",
                )

    def _check_contribution_bounds(self) -> None:
        """Bounds say what they do: only those the engine enforces may be set, R is explicit
        unless it is the product G × R_g, and never larger than that product."""
        groups, per_group = self.max_groups_per_unit, self.max_rows_per_group
        if self.privacy_unit is None:
            if self.max_rows_per_unit or groups or per_group:
                raise SpecError(
                    "privacy_unit",
                    "contribution bounds need 'privacy_unit' (without it each row is a unit "
                    "and contributes one row); remove the bounds or name the unit column",
                )
            return
        if not self.group_by and (groups or per_group):
            raise SpecError(
                "max_groups_per_unit" if groups else "max_rows_per_group",
                "max_groups_per_unit and max_rows_per_group bound groups, and this release has "
                "no group_by; remove them and set max_rows_per_unit",
            )
        if self.max_rows_per_unit is None and not (groups and per_group):
            raise SpecError(
                "max_rows_per_unit",
                "set max_rows_per_unit (the rows one unit may contribute), or both "
                "max_groups_per_unit and max_rows_per_group (it then defaults to their product)",
            )
        if groups and per_group and (self.max_rows_per_unit or 0) > groups * per_group:
            raise SpecError(
                "max_rows_per_unit",
                f"max_rows_per_unit ({self.max_rows_per_unit}) exceeds max_groups_per_unit × "
                f"max_rows_per_group = {groups * per_group}, which no unit can exceed; lower it "
                "or leave it out (it defaults to that product)",
            )

    def reuse_of(self, mean: MeanStatistic) -> MeanReuse:
        """The release's first count, and its first sum of the mean's column and bounds (and
        granularity, if the mean declares one): dividing those costs no ε and keeps the
        published sum, count and mean consistent."""
        count = next((s.name for s in self.statistics if isinstance(s, CountStatistic)), None)
        total = next(
            (
                s.name
                for s in self.statistics
                if isinstance(s, SumStatistic)
                and (s.column, s.lower, s.upper) == (mean.column, mean.lower, mean.upper)
                and mean.granularity in (None, s.granularity)
            ),
            None,
        )
        return MeanReuse(count, total)

    @property
    def rows_per_unit(self) -> int:
        """R, the rows one unit keeps after bounding: declared, else G × R_g; 1 without a unit."""
        if self.max_rows_per_unit is not None:
            return self.max_rows_per_unit
        if self.max_groups_per_unit and self.max_rows_per_group:
            return self.max_groups_per_unit * self.max_rows_per_group
        return 1

    @property
    def key_columns(self) -> list[str]:
        """All group-by columns, in declared order: the key columns of the released table."""
        return [column for group in self.group_by for column in group.key_columns]

    def canonical_json(self) -> str:
        """The spec as canonical JSON, for its hash (a released slot's identity in the ledger).

        The form is frozen at its first version: every statistic lists the fields all kinds
        had then, and renamed fields keep their first names, so a spec released before a
        refactor of this model is still the same spec. A field added later must enter only
        when it is set. The engine is left out: every engine computes the same release."""
        data = self.model_dump(mode="json", exclude={"engine"})
        for later in ("margins", "level_weights"):
            if data[later] is None:
                del data[later]
        data["statistics"] = [_canonical(statistic) for statistic in data["statistics"]]
        data["postprocess"] = _canonical(data["postprocess"])
        return json.dumps(data, sort_keys=True, separators=(",", ":"))


_FIRST_NAMES = {new: old for old, new in _RENAMED.items()}
_STATISTIC_FIELDS = ("column", "lower", "upper", "weight", "target_ci95", "granularity")


def _canonical(section: dict[str, Any]) -> dict[str, Any]:
    """A statistic or postprocess section under the canonical form's field names."""
    named = {_FIRST_NAMES.get(key, key): value for key, value in section.items()}
    if "kind" in named:
        named = dict.fromkeys(_STATISTIC_FIELDS) | named
    return named


def output_columns(stat: Statistic) -> list[str]:
    """The released columns a statistic makes: its values, its margin of error, and for a mean
    the flag of cells where it is undefined."""
    columns = [stat.name, f"{stat.name}{MOE95_SUFFIX}"]
    if isinstance(stat, MeanStatistic):
        columns.append(f"{stat.name}{UNDEFINED_SUFFIX}")
    return columns


class LoadedSpec(BaseModel):
    """A validated spec plus its resolved public key domains (the only keys ever released)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    spec: ReleaseSpec
    domains: list[pl.DataFrame]  # one per `group_by` entry, with that entry's key columns

    def key_grid(self) -> pl.DataFrame:
        """Every combination of public keys, in declared order: the rows of the released table."""
        grid = pl.DataFrame()
        for frame in self.domains:
            grid = (
                frame
                if grid.width == 0
                else grid.join(frame, how="cross", maintain_order="left_right")
            )
        return grid

    @property
    def cells(self) -> int:
        """Cells of the released table: the key grid's size (1 when ungrouped); public."""
        return math.prod(frame.height for frame in self.domains)

    def key_dtype(self, column: str) -> pl.DataType:
        return next(frame.schema[column] for frame in self.domains if column in frame.columns)

    def hash(self) -> str:
        """Identity of what gets released: the spec and its resolved key domains (not ε, which the
        ledger stores with each charge)."""
        digest = hashlib.sha256(self.spec.canonical_json().encode())
        for frame in self.domains:
            digest.update(json.dumps(frame.to_dict(as_series=False), default=str).encode())
        return digest.hexdigest()


def _is_tag(loc: Location, index: int) -> bool:
    """Whether loc[index] is the tag pydantic adds for a union member (a domain's form, a
    statistic's kind), which is not part of the YAML path."""
    part = loc[index]
    if index >= 1 and loc[index - 1] == "domain":
        return part in {"values", "range", "file"}
    return index >= 2 and loc[index - 2] == "statistics" and part in STATISTIC_KINDS


def parse_spec(data: Any, *, base_dir: Path | None = None, prefix: str = "release") -> LoadedSpec:
    """Validate a `release:` mapping and resolve its key domains; errors name the YAML path.

    `base_dir` is where `file:` domains are read from (default: the working directory).
    """
    try:
        spec = ReleaseSpec.model_validate(data)
    except ValidationError as exc:
        raise error_at_path(exc, prefix, SpecError, _is_tag) from None
    for group in spec.group_by:
        if isinstance(group.domain, FileDomain):
            group.domain._base_dir = base_dir
    return resolve(spec, prefix=prefix)


def resolve(spec: ReleaseSpec, *, prefix: str = "release") -> LoadedSpec:
    """The spec with its public key domains read (keys files relative to the spec's YAML file,
    else the working directory); SpecError naming the YAML path of a bad domain."""
    domains = [
        _resolve_domain(group, f"{prefix}.group_by[{i}].domain")
        for i, group in enumerate(spec.group_by)
    ]
    return LoadedSpec(spec=spec, domains=domains)


def load_spec(path: str | Path) -> LoadedSpec:
    """Read a spec file (`release:` at the top level) and validate it."""
    path = Path(path)
    document = read_sections(path, ["release"], SpecError, "spec file")
    return parse_spec(document["release"], base_dir=path.parent)


def _resolve_domain(group: GroupBy, path: str) -> pl.DataFrame:
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
